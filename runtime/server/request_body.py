"""Request bodies, bounded: at most ``max_body_bytes`` read (413 beyond, before any of it is parsed), JSON parsed
with a nesting-depth limit, every failure a one-line OpenAI-shaped error.

The limit is enforced while the body is received (a ``Content-Length`` over it is refused before a byte is read,
a chunked body as soon as it passes it), so a 50 MB prompt never reaches the JSON parser or the tokenizer."""
from __future__ import annotations

import asyncio
import json

DEFAULT_MAX_BODY_BYTES = 4 << 20  # 4 MiB: a full 128k-token context of text or token ids fits with room to spare
# OpenAI request bodies nest a few levels (messages -> content parts -> text); far deeper is an attack on every
# recursive walk that follows (json.loads itself raises RecursionError near 1,000 levels).
MAX_JSON_DEPTH = 32
# A body refused by its Content-Length alone is still read and discarded first when it declares at most this much
# over the limit, for at most DRAIN_SECONDS: a server that closes a socket with request bytes unread makes the kernel
# send a reset, which can destroy the 413 before the client reads it (nginx's "lingering close" for the same reason;
# seen as ConnectionResetError in test_body_just_over_the_limit_gets_413 on a loaded machine). Larger declared bodies
# are answered from the headers without a byte read.
DRAIN_MAX_BYTES = 8 << 20
DRAIN_SECONDS = 5.0


class BodyError(Exception):
    """A body refused before it is used: HTTP ``status``, one-line message (400 or 413)."""

    def __init__(self, message: str, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.status, self.code = status, code


def _too_large(limit: int) -> BodyError:
    return BodyError(f"the request body is over the {limit}-byte limit of this server (--max-body-bytes)", 413,
                     "request_too_large")


class BodyLimit:
    """ASGI middleware: reads a request's whole body, at most ``max_bytes`` of it, before the app runs, and hands
    the app the body in one message (later ``receive`` calls go to the client: a disconnect is still seen). Over
    the limit, the app never runs and the client gets a 413 in OpenAI's error shape."""

    def __init__(self, app, max_bytes: int, error_response):
        self.app, self.max_bytes, self.error_response = app, max_bytes, error_response

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            body = await self._read(scope, receive)
        except BodyError as e:
            return await self.error_response(e)(scope, receive, send)
        if body is None:  # the client left while sending
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, scope, receive) -> bytes | None:
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > self.max_bytes:
            if int(length) <= self.max_bytes + DRAIN_MAX_BYTES:
                await _drain(receive, int(length))
            raise _too_large(self.max_bytes)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _too_large(self.max_bytes)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


async def _drain(receive, budget: int) -> None:
    """Read and discard up to ``budget`` body bytes (DRAIN_MAX_BYTES above the limit at most), for DRAIN_SECONDS."""
    async def discard():
        left = budget
        while left > 0:
            message = await receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                return
            left -= len(message.get("body", b""))

    try:
        await asyncio.wait_for(discard(), DRAIN_SECONDS)
    except asyncio.TimeoutError:
        pass


def _depth_over(value, limit: int) -> bool:
    """Whether ``value`` nests deeper than ``limit`` (iterative: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def parse_json_object(raw: bytes) -> dict:
    """The body as a JSON object; BodyError (400, one line) for anything else."""
    try:
        body = json.loads(raw)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer over Python's 4,300-digit limit
        raise BodyError(f"the request body is not valid JSON: {str(e)[:200]}") from None
    except RecursionError:
        raise BodyError(f"the request body nests JSON deeper than {MAX_JSON_DEPTH} levels") from None
    if not isinstance(body, dict):
        raise BodyError("the request body must be a JSON object")
    if _depth_over(body, MAX_JSON_DEPTH):
        raise BodyError(f"the request body nests JSON deeper than {MAX_JSON_DEPTH} levels")
    return body
