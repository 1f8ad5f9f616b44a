"""OpenAI-compatible endpoints (FastAPI + uvicorn): ``/v1/completions``, ``/v1/chat/completions`` (JSON or SSE
streaming), ``/v1/models``, ``/health``.

Every request goes through :class:`EngineLoop`, so concurrent requests share the continuous batch. Errors use
OpenAI's body ``{"error": {"message", "type", "param", "code"}}``: 400 for bad parameters or a prompt beyond the
context, 503 when the queue is full. A streaming client that disconnects cancels its request (its KV blocks are
freed between steps); a string ``stop`` ends a request when its text contains it (the text is cut before it)."""
from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Any

# Module level (not inside create_app): FastAPI resolves the handlers' string annotations (``from __future__ import
# annotations``) in this module's globals, and a `Request` it cannot find becomes a required query parameter.
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from ..engine.llm import LLM
from ..engine.outputs import IncrementalDecoder
from ..engine.sampler import SamplingParams
from .engine_loop import EngineLoop, QueueFull


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


def _error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status_code=status)


def _num(body: dict, name: str, default, kind=(int, float)):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, kind):
        raise BadRequest(f"'{name}' = {value!r}: expected a number", name)
    return value


def _params(body: dict, max_tokens_default: int) -> tuple[SamplingParams, list[str], int]:
    """SamplingParams, stop strings and n from an OpenAI request body (400 naming the field otherwise)."""
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = max_tokens_default if max_tokens is None else max_tokens
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(f"'max_tokens' = {max_tokens!r}: expected an integer >= 1", "max_tokens")
    n = _num(body, "n", 1, int)
    if n < 1 or n > 16:
        raise BadRequest(f"'n' = {n!r}: expected an integer in [1, 16]", "n")
    temperature = _num(body, "temperature", 1.0)
    if not 0 <= temperature <= 2:
        raise BadRequest(f"'temperature' = {temperature!r}: expected a number in [0, 2]", "temperature")
    top_p = _num(body, "top_p", 1.0)
    seed = _num(body, "seed", None, int)
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else (stop or [])
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise BadRequest(f"'stop' = {stop!r}: expected a string or up to 4 non-empty strings", "stop")
    for unsupported in ("logprobs", "top_logprobs", "echo", "best_of", "logit_bias", "tools", "suffix"):
        if body.get(unsupported) not in (None, False, 1 if unsupported == "best_of" else None):
            raise BadRequest(f"'{unsupported}' is not supported by this server", unsupported)
    try:
        # top_k and ignore_eos are vLLM's extensions (the openai client sends them through extra_body)
        params = SamplingParams(max_new_tokens=max_tokens, temperature=float(temperature), top_p=float(top_p),
                                top_k=_num(body, "top_k", 0, int), seed=seed,
                                ignore_eos=bool(body.get("ignore_eos", False)))
    except ValueError as e:
        raise BadRequest(str(e), str(e).split(" ", 1)[0]) from None
    return params, stops, n


class _Choice:
    """One choice's detokenized text, with stop strings applied (the text is cut before the first match)."""

    def __init__(self, tokenizer, stops: list[str]):
        self.decoder = IncrementalDecoder(tokenizer)
        self.stops = stops
        self.text = ""
        self.sent = 0  # characters of text already handed out
        self.token_ids: list[int] = []
        self.finish_reason: str | None = None

    def push(self, ids: list[int], finish: str | None) -> str:
        """New text for these tokens ('' while a stop string may still be forming at the end)."""
        self.token_ids += ids
        self.text += self.decoder.push(ids) + (self.decoder.flush() if finish else "")
        for s in self.stops:
            k = self.text.find(s)
            if k >= 0:
                self.text, finish = self.text[:k], "stop"
        self.finish_reason = finish
        hold = 0
        if finish is None and self.stops:  # hold back a tail that could be the start of a stop string
            hold = max((j for s in self.stops for j in range(1, len(s)) if self.text.endswith(s[:j])), default=0)
        end = len(self.text) - hold
        new = self.text[self.sent:end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return new


def create_app(llm: LLM, model_name: str, max_waiting: int = 256):
    engine = EngineLoop(llm, max_waiting)
    tokenizer = llm.tokenizer
    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        # uvicorn on Ctrl-C / SIGTERM: stop accepting, then end what is still running (each stream gets an error
        # event, each waiting JSON request a 500) and free its blocks.
        engine.shutdown()

    app = FastAPI(title="modelgen", version="1", lifespan=lifespan)
    app.state.engine = engine

    @app.exception_handler(BadRequest)
    async def _bad(_request, e: BadRequest):
        return _error(e.status, str(e), e.param)

    @app.exception_handler(QueueFull)
    async def _full(_request, e: QueueFull):
        return _error(503, str(e), None, "server_overloaded")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, e):
        return _error(400, f"invalid request: {e.errors()[0].get('msg') if e.errors() else e}")

    async def _body(request: Request) -> dict:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BadRequest(f"the request body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        return body

    @app.get("/health")
    def health():
        return {"status": "ok", **engine.status()}

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "modelgen", "max_model_len": llm.max_model_len}]}

    def _encode_prompts(body: dict) -> list[list[int]]:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return [tokenizer.encode(prompt)]
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            return [tokenizer.encode(p) for p in prompt]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return [prompt]
        if isinstance(prompt, list) and prompt and all(isinstance(p, list) and p for p in prompt):
            return prompt
        raise BadRequest(f"'prompt' = {str(prompt)[:80]!r}: expected a string, a list of strings, or token ids",
                         "prompt")

    def _encode_chat(body: dict) -> list[list[int]]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise BadRequest("'messages': expected a non-empty list of {role, content} objects with string "
                             "content", "messages")
        rendered = tokenizer.apply_chat_template([{"role": m["role"], "content": m["content"]} for m in messages])
        return [tokenizer.encode(rendered, add_special_tokens=False)]

    def _submit(prompts: list[list[int]], params: SamplingParams, n: int):
        expanded = [p for p in prompts for _ in range(n)]
        # n samples of one prompt must differ: seed i of n is seed + i (a given seed stays reproducible)
        plist = [SamplingParams(**{**params.__dict__, "seed": None if params.seed is None else params.seed + i})
                 for _ in prompts for i in range(n)]
        try:
            return engine.submit(expanded, plist)
        except ValueError as e:
            raise BadRequest(str(e), "prompt" if "prompt" in str(e) else None) from None

    async def _collect(handle, choice: _Choice):
        while choice.finish_reason is None:
            event = await handle.events.get()
            if isinstance(event, Exception):
                raise event
            choice.push(*event)
        if choice.finish_reason == "stop" and handle.request.finish_reason != "stop":
            engine.cancel(handle)  # ended by a stop string: free it now

    async def _run(body: dict, prompts: list[list[int]], chat: bool, default_max: int):
        params, stops, n = _params(body, default_max)
        handles = _submit(prompts, params, n)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        choices = [_Choice(tokenizer, stops) for _ in handles]
        if not body.get("stream"):
            try:
                for h, c in zip(handles, choices):
                    await _collect(h, c)
            finally:
                for h in handles:
                    engine.cancel(h)  # no-op for finished requests (release is idempotent)
            out = []
            for i, c in enumerate(choices):
                item = {"index": i, "finish_reason": c.finish_reason, "logprobs": None}
                item.update({"message": {"role": "assistant", "content": c.text}} if chat else {"text": c.text})
                out.append(item)
            prompt_tokens = sum(len(h.request.prompt) for h in handles[::n])
            completion = sum(len(c.token_ids) for c in choices)
            return JSONResponse({"id": rid, "object": obj, "created": created, "model": model_name, "choices": out,
                                 "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                                           "total_tokens": prompt_tokens + completion}})

        async def events():
            import asyncio

            chunk_obj = "chat.completion.chunk" if chat else "text_completion"

            def chunk(i: int, text: str | None, finish: str | None, role: bool = False) -> str:
                if chat:
                    delta: dict[str, Any] = {"role": "assistant"} if role else {}
                    if text is not None:
                        delta["content"] = text
                    item = {"index": i, "delta": delta, "finish_reason": finish, "logprobs": None}
                else:
                    item = {"index": i, "text": text or "", "finish_reason": finish, "logprobs": None}
                return "data: " + json.dumps({"id": rid, "object": chunk_obj, "created": created,
                                              "model": model_name, "choices": [item]}) + "\n\n"

            try:
                if chat:
                    for i in range(len(handles)):
                        yield chunk(i, "", None, role=True)
                pending = {asyncio.ensure_future(h.events.get()): i for i, h in enumerate(handles)}
                while pending:
                    done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for fut in done:
                        i = pending.pop(fut)
                        event = fut.result()
                        if isinstance(event, Exception):
                            yield "data: " + json.dumps({"error": {"message": str(event), "type": "server_error",
                                                                   "param": None, "code": None}}) + "\n\n"
                            for f in pending:
                                f.cancel()
                            return
                        c = choices[i]
                        text = c.push(*event)
                        if text or c.finish_reason:
                            yield chunk(i, text, c.finish_reason)
                        if c.finish_reason is None:
                            pending[asyncio.ensure_future(handles[i].events.get())] = i
                        elif handles[i].request.finish_reason is None:
                            engine.cancel(handles[i])  # a stop string ended it
                yield "data: [DONE]\n\n"
            finally:  # also on client disconnect (the response task is cancelled): free the blocks
                for h in handles:
                    engine.cancel(h)

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await _body(request)
        return await _run(body, _encode_prompts(body), chat=False, default_max=16)  # OpenAI's default

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await _body(request)
        prompts = _encode_chat(body)
        # OpenAI's default for chat: up to the end of the context
        return await _run(body, prompts, chat=True, default_max=max(1, llm.max_model_len - len(prompts[0])))

    return app


def serve(llm: LLM, model_name: str, host: str = "127.0.0.1", port: int = 8000, max_waiting: int = 256) -> None:
    import uvicorn

    # On SIGTERM / Ctrl-C uvicorn stops accepting and lets running requests finish for up to 30 s, then cancels them
    # (their blocks are freed by the streams' finally) and runs the lifespan shutdown above.
    uvicorn.run(create_app(llm, model_name, max_waiting), host=host, port=port, log_level="warning",
                timeout_graceful_shutdown=30)
