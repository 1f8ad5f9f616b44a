"""A device-side timeline of device-resident speculative steps (bench/spec_oracle.py ``--timeline``; issue 29 item 4).

``runtime/engine/speculative.TIMELINE`` is set to a :class:`Timeline` for one generate call: each resident greedy step
marks its phase boundaries (``verify_start`` / ``verify_end``, ``read_done`` after the step's one device-to-host read,
``settle_start`` / ``settle_end`` around the draft's settle graph, ``chain{j}_start`` / ``chain{j}_end`` around each
chained draft graph) with a CUDA event recorded on the current stream and a host ``perf_counter`` stamp. The time
between two consecutive events is the GPU time between those points of the stream: from a phase's start to its end,
the phase's fill, upload and replay (busy, unless the host launched it slower than the GPU ran it); from one phase's
end to the next phase's start, the small ops launched in between plus the GPU's wait on the host (the gap this
timeline is for). ``report()`` gives, per interval, the median over steps of its GPU and host milliseconds.
"""
from __future__ import annotations

import statistics
import time

import torch


class Timeline:
    def __init__(self):
        self.steps: list[list[tuple[str, torch.cuda.Event, float]]] = []

    def mark(self, name: str) -> None:
        if name == "verify_start":
            self.steps.append([])
        if not self.steps:  # a draft phase before the first resident verify (the prefill step's)
            return
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        self.steps[-1].append((name, ev, time.perf_counter()))

    def report(self) -> dict:
        """Per interval: ``gpu_ms`` / ``host_ms`` medians over steps; phases (``X_start -> X_end``) are named ``X``,
        the intervals between phases ``a->b``; ``gpu_busy_ms`` / ``gpu_gap_ms``: the sums of those medians (a step's
        GPU time from its verify start to the next one's, split into phases and gaps)."""
        torch.cuda.synchronize()
        gpu: dict[str, list[float]] = {}
        host: dict[str, list[float]] = {}
        phases = set()
        for i, marks in enumerate(self.steps):
            nxt = self.steps[i + 1][:1] if i + 1 < len(self.steps) else []
            for (a, ea, ta), (b, eb, tb) in zip(marks, marks[1:] + [(f"next_{n}", e, t) for n, e, t in nxt]):
                if a.endswith("_start") and b == a[:-len("_start")] + "_end":
                    key = a[:-len("_start")]
                    phases.add(key)
                else:
                    key = f"{a}->{b}"
                gpu.setdefault(key, []).append(ea.elapsed_time(eb))
                host.setdefault(key, []).append(1e3 * (tb - ta))
        med = {k: statistics.median(v) for k, v in gpu.items()}
        return {"steps": len(self.steps),
                "gpu_ms": med, "host_ms": {k: statistics.median(v) for k, v in host.items()},
                "gpu_busy_ms": sum(v for k, v in med.items() if k in phases),
                "gpu_gap_ms": sum(v for k, v in med.items() if k not in phases)}
