"""Stop strings matched incrementally: each generated character is fed once to a Knuth-Morris-Pratt automaton per
stop string, so matching costs O(characters generated x stop strings) in all, whatever the stop strings' length.

Searching the whole text for every stop and then every prefix of every stop at its end (what the server did) costs
O(len(stop)^2) per token on the event loop: one 60k-character stop string stalled every client 0.6 s per token."""
from __future__ import annotations


def _failure(pattern: str) -> list[int]:
    """KMP failure table: ``fail[i]`` is the length of the longest proper prefix of ``pattern[:i + 1]`` that is
    also its suffix."""
    fail = [0] * len(pattern)
    k = 0
    for i in range(1, len(pattern)):
        while k and pattern[i] != pattern[k]:
            k = fail[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        fail[i] = k
    return fail


class StopMatcher:
    """Feed text as it is generated; :meth:`feed` says where the first stop string ends, and :attr:`partial` how
    many trailing characters could still be the start of one (to be held back from a stream)."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self._fail = [_failure(s) for s in self.stops]
        self._state = [0] * len(self.stops)  # characters of each stop matched at the end of the text so far
        self.fed = 0  # characters fed so far

    @property
    def partial(self) -> int:
        """The longest tail of the text fed that is a proper prefix of a stop string."""
        return max(self._state, default=0)

    def feed(self, text: str) -> int | None:
        """Index (in all the text fed so far) where the first completed stop string starts, or None. A stop that
        completes first wins (the text before it was already handed out); of two completing on the same character,
        the longer (it starts earlier)."""
        for ch in text:
            self.fed += 1
            found = None
            for j, stop in enumerate(self.stops):
                k = self._state[j]
                fail = self._fail[j]
                while k and stop[k] != ch:
                    k = fail[k - 1]
                if stop[k] == ch:
                    k += 1
                if k == len(stop):
                    if found is None or len(stop) > found:
                        found = len(stop)
                    k = fail[k - 1]
                self._state[j] = k
            if found is not None:
                return self.fed - found
        return None
