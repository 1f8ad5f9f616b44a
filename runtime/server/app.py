"""OpenAI-compatible endpoints (FastAPI + uvicorn): ``/v1/completions``, ``/v1/chat/completions`` (JSON or SSE
streaming), ``/v1/models``, ``/health``, ``/metrics`` (Prometheus).

Every request goes through :class:`EngineLoop`, so concurrent requests share the continuous batch. Every request
field is either served or refused with a 400 naming it (:data:`SERVED_FIELDS`, :data:`REFUSED_FIELDS`; a field
in neither is refused as unknown): nothing is silently ignored. Every error body, whatever the status (400, 401,
404, 405, 422, 500, 503), is OpenAI's ``{"error": {"message", "type", "param", "code"}}``: 400 for bad parameters
or a prompt beyond the context, 404 for another ``model`` or an unknown route, 503 when the queue is full or the
server is stopping, 413 for a body over ``max_body_bytes``. A client that disconnects, streaming or not, cancels
its request (its KV blocks are freed between steps); a string ``stop`` ends a request when its text contains it
(the text is cut before it; matched incrementally, :mod:`.stop_matcher`).

Every per-request cost before the engine -- JSON parsing, validation, chat-template rendering, tokenization -- runs
in a small pool of prep threads, never on the event loop, and is bounded: the body by ``max_body_bytes``
(:mod:`.request_body`), a prompt by its character count before it is tokenized, a template by its render limits,
sampling parameters to values that cannot overflow in the shared engine step, a request by what the KV cache can
ever hold (SECURITY.md: Server)."""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import json
import logging
import math
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

# Module level (not inside create_app): FastAPI resolves the handlers' string annotations (``from __future__ import
# annotations``) in this module's globals, and a `Request` it cannot find becomes a required query parameter.
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..engine.llm import LLM
from ..engine.outputs import IncrementalDecoder
from ..engine.sampler import SamplingParams
from .engine_loop import EngineLoop, QueueFull, ShuttingDown
from .request_body import DEFAULT_MAX_BODY_BYTES, BodyError, BodyLimit, parse_json_object
from .stop_matcher import StopMatcher

log = logging.getLogger("modelgen.server")
access_log = logging.getLogger("modelgen.access")

MAX_LOGPROBS = 20  # top log-probabilities per token at most (OpenAI's chat limit; vLLM's default max_logprobs)
MAX_STOPS = 4  # OpenAI's limit
MAX_STOP_CHARS = 1024  # per stop string: matching is linear whatever the length, this bounds memory and hold-back
# The smallest temperature above 0 (greedy): logits / 1e-300 overflow to inf and the softmax to NaN, which
# torch.multinomial refuses inside the shared engine step. 1e-3 keeps |logits| up to ~1e35 finite.
MIN_TEMPERATURE = 1e-3
REPETITION_PENALTY_RANGE = (1e-2, 1e2)  # the same overflow (logits divided or multiplied by it)
# A prompt longer than max_model_len x this many characters cannot fit the context whatever the tokenizer (unless
# one token covers more characters than this: the longest token of the vocabulary raises the bound), so it is
# refused before tokenizing: tokenizing 8 M characters took 53 s.
MIN_CHARS_PER_TOKEN_BOUND = 16
MAX_ERROR_CHARS = 600  # an error message is cut here: quoting a value in full would amplify the request
PREP_WORKERS = 2  # threads that parse, render and tokenize requests (the event loop only moves bytes)

# ------------------------------------------------------------------------------------------------ request fields
# Fields whose value is served (read and acted on). The vLLM extensions (the openai client sends them through
# extra_body) are served on both endpoints.
_COMMON = {"model", "n", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "max_tokens",
           "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "user"}
VLLM_EXTRAS = {"top_k", "min_p", "repetition_penalty", "stop_token_ids", "ignore_eos"}
# Accepted and reported nowhere, by definition: end-user ids and labels that never change what is generated.
NO_EFFECT_FIELDS = {"user", "metadata", "safety_identifier", "prompt_cache_key"}
SERVED_FIELDS = {
    "completions": _COMMON | VLLM_EXTRAS | {"prompt", "echo", "best_of", "suffix"},
    "chat": _COMMON | VLLM_EXTRAS | {"messages", "max_completion_tokens", "top_logprobs", "metadata",
                                     "safety_identifier", "prompt_cache_key", "store", "modalities",
                                     "response_format", "tool_choice", "parallel_tool_calls", "tools"},
}
_VLLM_HINT = ("structured output and tool calling are what the `vllm` target is for: serve the generated model "
              "with vLLM (README: Serving with vLLM)")
# Fields refused unless absent / null / their no-op value (in SERVED_FIELDS above when a no-op value is accepted):
# field -> (accepted no-op values, why not).
REFUSED_FIELDS: dict[str, tuple[tuple, str]] = {
    "echo": ((False,), "echo (the prompt repeated in the output) is not supported"),
    "best_of": ((1,), "best_of > 1 (server-side ranking of samples) is not supported; use n"),
    "suffix": (("",), "suffix (insertion) is not supported"),
    "response_format": (({"type": "text"},), f"response_format (JSON mode / schemas) is not supported; {_VLLM_HINT}"),
    "tools": (([],), f"tools (tool calling) are not supported; {_VLLM_HINT}"),
    "tool_choice": (("none",), f"tool_choice (tool calling) is not supported; {_VLLM_HINT}"),
    "parallel_tool_calls": ((), f"parallel_tool_calls (tool calling) is not supported; {_VLLM_HINT}"),
    "functions": ((), f"functions (tool calling) are not supported; {_VLLM_HINT}"),
    "function_call": ((), f"function_call (tool calling) is not supported; {_VLLM_HINT}"),
    "store": ((False,), "store (stored completions) is not supported"),
    "modalities": ((["text"],), "only the text modality is supported"),
    "audio": ((), "audio output is not supported"),
    "prediction": ((), "predicted outputs are not supported"),
    "reasoning_effort": ((), "reasoning_effort is not supported"),
    "verbosity": ((), "verbosity is not supported"),
    "service_tier": ((), "service_tier is not supported"),
    "web_search_options": ((), "web search is not supported"),
    "moderation": ((), "moderation is not supported"),
    "prompt_cache_options": ((), "prompt_cache_options are not supported"),
    "prompt_cache_retention": ((), "prompt_cache_retention is not supported"),
}
STREAM_OPTIONS = {"include_usage", "include_obfuscation"}


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400, kind: str = "invalid_request_error",
                 code: str | None = None):
        if len(message) > MAX_ERROR_CHARS:
            message = message[:MAX_ERROR_CHARS] + "... (truncated)"
        super().__init__(message)
        self.param, self.status, self.kind, self.code = param, status, kind, code


def _error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
           code: str | int | None = None):
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                        status_code=status)


def _check_fields(body: dict, endpoint: str) -> None:
    """400 naming the field for one that is neither served nor a no-op value of a refused one."""
    served = SERVED_FIELDS[endpoint]
    for name, value in body.items():
        if name in REFUSED_FIELDS:
            noop, why = REFUSED_FIELDS[name]
            if value is None or (name in served and any(value == v and type(value) is type(v) for v in noop)):
                continue
            if name == "best_of" and name in served and value == body.get("n", 1) and type(value) is int:
                continue  # best_of = n: n samples, nothing to rank
            raise BadRequest(f"'{name}' = {str(value)[:80]!r}: {why}", name)
        if name not in served:
            raise BadRequest(f"'{name}' is not a request field this server knows (endpoint /v1/"
                             f"{'chat/' if endpoint == 'chat' else ''}completions); it would be ignored, so it is "
                             f"refused", name)


def _num(body: dict, name: str, default, kind=(int, float)):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, kind) or (isinstance(value, float) and not math.isfinite(value)):
        raise BadRequest(f"'{name}' = {value!r}: expected {'an integer' if kind is int else 'a number'}", name)
    return value


def _params(body: dict, max_tokens_default: int, chat: bool, vocab_size: int
            ) -> tuple[SamplingParams, list[str], int, bool]:
    """SamplingParams, stop strings, n and include_usage from an OpenAI request body (400 naming the field
    otherwise)."""
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
    if 0 < temperature < MIN_TEMPERATURE:
        raise BadRequest(f"'temperature' = {temperature!r}: expected 0 (greedy) or at least {MIN_TEMPERATURE:g} "
                         f"(smaller ones overflow the logits)", "temperature")
    top_p = _num(body, "top_p", 1.0)
    seed = _num(body, "seed", None, int)
    # sample i of n is seeded seed + i, and torch generator seeds are 64-bit
    if seed is not None and not 0 <= seed <= 2**64 - n:
        raise BadRequest(f"'seed' = {seed!r}: expected an integer in [0, 2**64 - n] (sample i of n is seeded "
                         f"seed + i, a 64-bit generator seed)", "seed")
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else (stop or [])
    if not isinstance(stops, list) or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops) \
            or len(stops) > MAX_STOPS:
        raise BadRequest(f"'stop' = {str(stop)[:80]!r}: expected a string or up to {MAX_STOPS} non-empty strings of "
                         f"at most {MAX_STOP_CHARS} characters", "stop")
    repetition_penalty = _num(body, "repetition_penalty", 1.0)
    low, high = REPETITION_PENALTY_RANGE
    if not low <= repetition_penalty <= high:
        raise BadRequest(f"'repetition_penalty' = {repetition_penalty!r}: expected a number in [{low:g}, {high:g}] "
                         f"(1 = off)", "repetition_penalty")
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size
                                                 for t in stop_ids):
        raise BadRequest(f"'stop_token_ids' = {stop_ids!r}: expected token ids in [0, {vocab_size - 1}]",
                         "stop_token_ids")
    if body.get("best_of") not in (None, 1, n):
        raise BadRequest(f"'best_of' = {body['best_of']!r}: {REFUSED_FIELDS['best_of'][1]}", "best_of")
    bias = body.get("logit_bias")
    logit_bias = None
    if bias is not None:
        if not isinstance(bias, dict):
            raise BadRequest(f"'logit_bias' = {bias!r}: expected an object of token id -> bias", "logit_bias")
        logit_bias = {}
        for k, v in bias.items():
            try:
                tid = int(k)
            except (TypeError, ValueError):
                tid = -1
            if not 0 <= tid < vocab_size or isinstance(v, bool) or not isinstance(v, (int, float)) \
                    or not -100 <= v <= 100:
                raise BadRequest(f"'logit_bias' entry {k!r}: {v!r}: expected a token id in [0, {vocab_size - 1}] -> "
                                 f"a number in [-100, 100]", "logit_bias")
            logit_bias[tid] = float(v)
    for name in ("frequency_penalty", "presence_penalty"):
        if not -2 <= _num(body, name, 0.0) <= 2:
            raise BadRequest(f"'{name}' = {body[name]!r}: expected a number in [-2, 2]", name)
    if chat:
        want = body.get("logprobs")
        if want is not None and not isinstance(want, bool):
            raise BadRequest(f"'logprobs' = {want!r}: expected true or false", "logprobs")
        top = _num(body, "top_logprobs", None, int)
        if top is not None and not 0 <= top <= MAX_LOGPROBS:
            raise BadRequest(f"'top_logprobs' = {top!r}: expected an integer in [0, {MAX_LOGPROBS}]", "top_logprobs")
        if top is not None and not want:
            raise BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        logprobs = (top or 0) if want else None
    else:
        logprobs = _num(body, "logprobs", None, int)
        if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
            raise BadRequest(f"'logprobs' = {logprobs!r}: expected an integer in [0, {MAX_LOGPROBS}]", "logprobs")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest(f"'stream' = {stream!r}: expected true or false", "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise BadRequest("'stream_options' is only allowed with 'stream': true", "stream_options")
        if not isinstance(options, dict):
            raise BadRequest(f"'stream_options' = {options!r}: expected an object", "stream_options")
        for k, v in options.items():
            if k not in STREAM_OPTIONS:
                raise BadRequest(f"'stream_options.{k}' is not a stream option this server knows", f"stream_options.{k}")
            if v is not None and not isinstance(v, bool):
                raise BadRequest(f"'stream_options.{k}' = {v!r}: expected true or false", f"stream_options.{k}")
        if options.get("include_obfuscation"):
            raise BadRequest("'stream_options.include_obfuscation' (padding of stream events) is not supported",
                             "stream_options.include_obfuscation")
        include_usage = bool(options.get("include_usage"))
    ignore_eos = body.get("ignore_eos", False)
    if ignore_eos is not None and not isinstance(ignore_eos, bool):
        raise BadRequest(f"'ignore_eos' = {ignore_eos!r}: expected true or false", "ignore_eos")
    try:
        # top_k, min_p, repetition_penalty, stop_token_ids and ignore_eos are vLLM's extensions (the openai client
        # sends them through extra_body)
        params = SamplingParams(
            max_tokens=max_tokens, temperature=float(temperature), top_p=float(top_p),
            top_k=_num(body, "top_k", 0, int), seed=seed, ignore_eos=bool(ignore_eos),
            stop_token_ids=tuple(stop_ids), min_p=float(_num(body, "min_p", 0.0)),
            presence_penalty=float(_num(body, "presence_penalty", 0.0)),
            frequency_penalty=float(_num(body, "frequency_penalty", 0.0)),
            repetition_penalty=float(repetition_penalty), logit_bias=logit_bias,
            logprobs=logprobs)
    except ValueError as e:
        name = str(e).split(" ", 1)[0]
        raise BadRequest(str(e), "max_tokens" if name == "max_new_tokens" else name) from None
    return params, stops, n, include_usage


class _Choice:
    """One choice's detokenized text, with stop strings applied (the text is cut before the first match)."""

    def __init__(self, tokenizer, stops: list[str]):
        self.decoder = IncrementalDecoder(tokenizer)
        self.matcher = StopMatcher(stops) if stops else None
        self.text = ""
        self.sent = 0  # characters of text already handed out
        self.token_ids: list[int] = []
        self.finish_reason: str | None = None
        self.logprobs_sent = 0  # tokens whose log-probabilities were already handed out (streaming)

    def push(self, ids: list[int], finish: str | None) -> str:
        """New text for these tokens ('' while a stop string may still be forming at the end)."""
        self.token_ids += ids
        new = self.decoder.push(ids) + (self.decoder.flush() if finish else "")
        self.text += new
        if self.matcher is not None:
            k = self.matcher.feed(new)  # each character once: linear in the text generated
            if k is not None:
                self.text, finish = self.text[:k], "stop"
        self.finish_reason = finish
        # hold back a tail that could be the start of a stop string
        hold = self.matcher.partial if finish is None and self.matcher is not None else 0
        end = len(self.text) - hold
        out = self.text[self.sent:end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out


class _Metrics:
    """Prometheus metrics of one app (its own registry, so several apps in one process do not collide)."""

    def __init__(self, engine: EngineLoop):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry()
        self.requests = Counter("modelgen_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.prompt_tokens = Counter("modelgen_prompt_tokens", "Prompt tokens of the requests served", registry=r)
        self.generation_tokens = Counter("modelgen_generation_tokens", "Tokens generated", registry=r)
        buckets = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
        self.ttft = Histogram("modelgen_time_to_first_token_seconds", "From submission to the first token",
                              buckets=buckets, registry=r)
        self.latency = Histogram("modelgen_e2e_request_latency_seconds", "From arrival to the response's end, "
                                 "completion requests", buckets=buckets, registry=r)
        blocks = engine.llm.blocks
        Gauge("modelgen_kv_cache_usage_ratio", "Fraction of the KV-cache blocks in use", registry=r) \
            .set_function(lambda: 1 - blocks.num_free / blocks.num_blocks if blocks.num_blocks else 0.0)
        Gauge("modelgen_kv_cache_blocks", "KV-cache blocks in all", registry=r).set_function(lambda: blocks.num_blocks)
        Gauge("modelgen_requests_in_flight", "Requests running or waiting in the engine", registry=r) \
            .set_function(engine.in_flight)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


_ROUTES = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"}


class _Gate:
    """ASGI middleware: the API key on /v1 routes (``Authorization: Bearer KEY``, compared in constant time), one
    access-log line and the request counter per request (at the end of a stream), and any unhandled exception as a
    500 in OpenAI's error shape (logged with its traceback)."""

    def __init__(self, app, api_key: str | None, metrics: _Metrics):
        self.app, self.metrics = app, metrics
        self.key = f"Bearer {api_key}".encode() if api_key else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = {"code": None}

        async def send_tracked(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if self.key is not None and scope["path"].startswith("/v1"):
                given = dict(scope["headers"]).get(b"authorization", b"")
                if not hmac.compare_digest(given, self.key):
                    resp = _error(401, "missing or incorrect API key (expected the header Authorization: Bearer "
                                  "<the --api-key of the server>)", None, "invalid_request_error", "invalid_api_key")
                    return await resp(scope, receive, send_tracked)
            await self.app(scope, receive, send_tracked)
        except Exception as e:  # a server bug: OpenAI's shape for the client, the traceback in the server's log
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            if status["code"] is None:
                await _error(500, f"internal server error: {type(e).__name__}: {str(e)[:MAX_ERROR_CHARS]}",
                             None, "server_error")(
                    scope, receive, send_tracked)
        finally:
            path = scope["path"]
            self.metrics.requests.labels(path if path in _ROUTES else "other", str(status["code"])).inc()
            client = scope.get("client") or ("-", 0)
            access_log.info('%s:%s "%s %s HTTP/%s" %s %.3fs', client[0], client[1], scope.get("method"), path,
                            scope.get("http_version", "1.1"), status["code"], time.perf_counter() - t0)


def load_chat_template(value: str) -> tuple[str, str]:
    """``--chat-template FILE|STRING``: (template text, where it came from). A path to a file is read; otherwise the
    value must itself be a Jinja template (contain ``{{`` or ``{%``)."""
    path = Path(value).expanduser()
    try:
        if path.is_file():
            return path.read_text(encoding="utf-8"), str(path)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--chat-template {value}: cannot read: {e}") from None
    if "{{" in value or "{%" in value:
        return value, "--chat-template"
    raise ValueError(f"--chat-template {value!r}: neither a file nor a Jinja template (expected a path to a "
                     f".jinja file, or the template text itself)")


def _longest_token(tokenizer) -> int:
    """Characters of the vocabulary's longest token (how many characters one token may cover, near enough)."""
    try:
        return max(map(len, tokenizer.tok.get_vocab()), default=1)
    except AttributeError:  # a stand-in tokenizer without a vocabulary
        return 1


def create_app(llm: LLM, model_name: str, max_waiting: int = 256, *, api_key: str | None = None,
               chat_template: str | None = None, chat_template_source: str = "--chat-template", on_shutdown=None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
    """The FastAPI app over ``llm``. ``api_key``: required as ``Authorization: Bearer KEY`` on /v1 routes.
    ``chat_template``: a Jinja chat template replacing the checkpoint's (``--chat-template``). ``on_shutdown``:
    called after the engine loop stopped (serve() closes the LLM's ranks there). ``max_body_bytes``: larger request
    bodies get 413 (``--max-body-bytes``)."""
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise ValueError(f"--max-body-bytes {max_body_bytes!r}: expected a positive number of bytes")
    tokenizer = llm.tokenizer  # ValueError naming the checkpoint when it has no tokenizer.json
    if chat_template is not None:
        tokenizer.chat_template, tokenizer.template_source, tokenizer._compiled = \
            chat_template, chat_template_source, None
        tokenizer._template()  # a syntax error fails at start, naming the template
    engine = EngineLoop(llm, max_waiting)
    metrics = _Metrics(engine)
    # Parsing, validation, chat-template rendering and tokenization run here, never on the event loop: a slow
    # request then delays only itself, and /health, streams and SIGTERM keep being served.
    prep = concurrent.futures.ThreadPoolExecutor(PREP_WORKERS, thread_name_prefix="modelgen-prep")
    max_prompt_chars = llm.max_model_len * max(MIN_CHARS_PER_TOKEN_BOUND, _longest_token(tokenizer))

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        # uvicorn on Ctrl-C / SIGTERM: stop accepting; serve() aborts what still runs after the grace period (each
        # stream gets an error event, each waiting JSON request a 503); then the loop stops and frees the blocks.
        prep.shutdown(wait=False, cancel_futures=True)
        engine.shutdown()
        if on_shutdown is not None:
            on_shutdown()

    app = FastAPI(title="modelgen", version="1", lifespan=lifespan)
    app.state.engine = engine
    app.state.metrics = metrics
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes,
                       error_response=lambda e: _error(e.status, str(e), None, "invalid_request_error", e.code))
    app.add_middleware(_Gate, api_key=api_key, metrics=metrics)  # added last: outermost (logs the 413s too)

    @app.exception_handler(BadRequest)
    async def _bad(_request, e: BadRequest):
        return _error(e.status, str(e), e.param, e.kind, e.code)

    @app.exception_handler(QueueFull)
    async def _full(_request, e: QueueFull):
        return _error(503, str(e), None, "server_overloaded")

    @app.exception_handler(ShuttingDown)
    async def _stopping(_request, e: ShuttingDown):
        return _error(503, str(e), None, "server_shutting_down")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, e):
        return _error(400, f"invalid request: {e.errors()[0].get('msg') if e.errors() else e}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, e: StarletteHTTPException):
        if e.status_code == 404:
            message = f"no route {request.url.path} (routes: {', '.join(sorted(_ROUTES))})"
        elif e.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(e.detail)
        return _error(e.status_code, message, None, "invalid_request_error" if e.status_code < 500 else "server_error",
                      e.status_code)

    def _body(raw: bytes) -> dict:
        try:
            body = parse_json_object(raw)
        except BodyError as e:
            raise BadRequest(str(e), None, e.status, code=e.code) from None
        model = body.get("model")
        if model is not None and model != model_name:
            raise BadRequest(f"The model '{str(model)[:80]}' does not exist (this server serves '{model_name}')",
                             "model", 404, code="model_not_found")
        return body

    @app.get("/health")
    def health():
        return {"status": "ok", **engine.status()}

    @app.get("/metrics")
    def prometheus():
        data, content_type = metrics.render()
        return Response(data, media_type=content_type)

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "modelgen", "max_model_len": llm.max_model_len}]}

    def _check_chars(chars: int, param: str) -> None:
        if chars > max_prompt_chars:
            raise BadRequest(f"'{param}': {chars} characters cannot fit max_model_len {llm.max_model_len} tokens (at "
                             f"most {max_prompt_chars} characters); refused before tokenizing", param)

    def _check_count(count: int) -> None:
        """Refused before tokenizing: more requests than the server ever holds (the engine's own check, early)."""
        capacity = max_waiting + llm.max_num_seqs
        if count > capacity:
            raise QueueFull(f"{count} requests (prompts x n) at once; the server accepts {capacity} requests in flight")

    def _encode_prompts(body: dict, n: int) -> list[list[int]]:
        prompt = body.get("prompt")
        texts = [prompt] if isinstance(prompt, str) else prompt
        if isinstance(texts, list) and texts and all(isinstance(p, str) for p in texts):
            _check_count(len(texts) * n)
            for p in texts:
                _check_chars(len(p), "prompt")
            return [tokenizer.encode(p) for p in texts]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            prompts = [prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, list) and p for p in prompt):
            prompts = prompt
        else:
            raise BadRequest(f"'prompt' = {str(prompt)[:80]!r}: expected a string, a list of strings, or token ids",
                             "prompt")
        _check_count(len(prompts) * n)
        for i, p in enumerate(prompts):
            if len(p) > llm.max_model_len:  # before the engine checks each id of it
                raise BadRequest(f"prompt {i} ({len(p)} tokens) exceeds max_model_len {llm.max_model_len}", "prompt")
        return prompts

    def _content(m: dict, i: int) -> str:
        content = m.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                             and isinstance(p.get("text"), str) for p in content):
            return "".join(p["text"] for p in content)  # text content parts
        raise BadRequest(f"'messages[{i}].content': expected a string or a list of text parts (only text is "
                         f"supported)", "messages")

    def _encode_chat(body: dict) -> list[list[int]]:
        from ..tokenizer import ChatTemplateError, TokenizerFileError

        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise BadRequest("'messages': expected a non-empty list of {role, content} objects", "messages")
        for i, m in enumerate(messages):
            extra = set(m) - {"role", "content", "name"}
            if extra:
                raise BadRequest(f"'messages[{i}]': field(s) {', '.join(sorted(extra))} not supported (tool calling: "
                                 f"{_VLLM_HINT})", "messages")
        _check_chars(sum(len(_content(m, i)) for i, m in enumerate(messages)), "messages")
        try:
            if not tokenizer.has_chat_template():
                raise BadRequest(f"{tokenizer.template_source}: the checkpoint has no chat template, so "
                                 f"/v1/chat/completions cannot render messages; start the server with "
                                 f"--chat-template FILE|STRING (or use /v1/completions)", "messages")
            rendered = tokenizer.apply_chat_template(
                [{"role": m["role"], "content": _content(m, i)} for i, m in enumerate(messages)])
        except (ChatTemplateError, TokenizerFileError) as e:
            raise BadRequest(str(e), "messages") from None
        _check_chars(len(rendered), "messages")
        return [tokenizer.encode(rendered, add_special_tokens=False)]

    def _check_fits(prompts: list[list[int]], params: SamplingParams) -> None:
        """A request that can never fit the KV cache is refused now (in the prep thread, with the OpenAI field), by
        the scheduler's own rule (Scheduler._check_fits: prompt + max_tokens - 1 cached tokens, the last sampled token
        is never fed), which refuses it again at submission for Python API callers."""
        blocks = llm.blocks
        for i, p in enumerate(prompts):
            need = len(p) + params.max_tokens - 1
            if params.max_tokens > 0 and need <= llm.max_model_len and blocks.blocks_needed(need) > blocks.num_blocks:
                raise BadRequest(f"prompt {i} ({len(p)} tokens) + max_tokens ({params.max_tokens}) need "
                                 f"{blocks.blocks_needed(need)} KV-cache blocks but the cache has only "
                                 f"{blocks.num_blocks} (--num-blocks / --kv-cache-memory): it could never run",
                                 "max_tokens")

    def _prepare(raw: bytes, chat: bool):
        """Everything a request costs before the engine (in a prep thread): body, fields, prompts, parameters."""
        body = _body(raw)
        _check_fields(body, "chat" if chat else "completions")
        if chat:
            prompts = _encode_chat(body)
            # OpenAI's default for chat: up to the end of the context
            default_max = max(1, llm.max_model_len - len(prompts[0]))
            params, stops, n, include_usage = _params(body, default_max, True, llm.vocab_size)
        else:
            params, stops, n, include_usage = _params(body, 16, False, llm.vocab_size)  # OpenAI's default: 16
            prompts = _encode_prompts(body, n)
        _check_fits(prompts, params)
        return body, prompts, params, stops, n, include_usage

    def _submit(prompts: list[list[int]], params: SamplingParams, n: int):
        if params.uses_logits and (llm.speculative is not None or getattr(llm.runner, "on_device_sampling", False)):
            raise BadRequest("penalties, logit_bias, min_p and logprobs are not supported with speculative decoding "
                             "or on-device sampling (the server was started with one of them)", None)
        expanded = [p for p in prompts for _ in range(n)]
        # n samples of one prompt must differ: seed i of n is seed + i (a given seed stays reproducible)
        plist = [SamplingParams(**{**params.__dict__, "seed": None if params.seed is None else params.seed + i})
                 for _ in prompts for i in range(n)]
        try:
            return engine.submit(expanded, plist)
        except ValueError as e:
            raise BadRequest(str(e), "prompt" if "prompt" in str(e) else None) from None

    def _token_text(t: int) -> str:
        return tokenizer.decode([t], skip_special_tokens=False)

    def _logprobs(handle, choice: _Choice, start: int, end: int, chat: bool, offset: int = 0):
        """The OpenAI logprobs object of tokens [start, end) of a choice (None when not asked for)."""
        if handle.request.params.logprobs is None:
            return None
        entries = handle.request.logprobs[start:end]
        ids = choice.token_ids[start:end]
        if chat:
            def item(t, lp):
                s = _token_text(t)
                return {"token": s, "logprob": lp, "bytes": list(s.encode("utf-8"))}
            return {"content": [{**item(t, lp), "top_logprobs": [item(u, v) for u, v in top]}
                                for t, (lp, top) in zip(ids, entries)], "refusal": None}
        tokens = [_token_text(t) for t in ids]
        offsets = []
        for s in tokens:
            offsets.append(offset)
            offset += len(s)
        return {"tokens": tokens, "token_logprobs": [lp for lp, _ in entries],
                "top_logprobs": [{**{_token_text(u): v for u, v in top}, _token_text(t): lp}
                                 for t, (lp, top) in zip(ids, entries)], "text_offset": offsets}

    async def _collect(handle, choice: _Choice):
        while choice.finish_reason is None:
            event = await handle.events.get()
            if isinstance(event, ValueError):  # this request's own fault, refused by the engine (400)
                raise BadRequest(str(event), None) from None
            if isinstance(event, Exception):
                raise event
            choice.push(*event)
        if choice.finish_reason == "stop" and handle.request.finish_reason != "stop":
            engine.cancel(handle)  # ended by a stop string: free it now

    def _observe(handles, prompts_tokens: int, completion_tokens: int, t0: float):
        metrics.prompt_tokens.inc(prompts_tokens)
        metrics.generation_tokens.inc(completion_tokens)
        firsts = [h.request.t_first - h.request.t_submit for h in handles if h.request.t_first is not None]
        if firsts:
            metrics.ttft.observe(min(firsts))
        metrics.latency.observe(time.perf_counter() - t0)

    async def _until_disconnect(request: Request) -> None:
        """Returns when the client has gone (the body was read already: the next ASGI message is the disconnect)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def _collect_all(request: Request, handles, choices) -> bool:
        """Every choice collected (True), or False when the client went away first: then the requests are
        cancelled (their KV blocks freed between steps) instead of running to max_tokens for nobody."""
        collect = asyncio.ensure_future(asyncio.gather(*(_collect(h, c) for h, c in zip(handles, choices))))
        gone = asyncio.ensure_future(_until_disconnect(request))
        try:
            await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not collect.done():
                return False
            collect.result()  # an engine error event raises here
            return True
        finally:
            collect.cancel()
            gone.cancel()
            for h in handles:
                engine.cancel(h)  # no-op for finished requests (release is idempotent)

    async def _run(request: Request, chat: bool):
        t0 = time.perf_counter()
        raw = await request.body()  # at most max_body_bytes (BodyLimit)
        body, prompts, params, stops, n, include_usage = await asyncio.get_running_loop().run_in_executor(
            prep, _prepare, raw, chat)
        handles = _submit(prompts, params, n)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        choices = [_Choice(tokenizer, stops) for _ in handles]
        prompt_tokens = sum(len(h.request.prompt) for h in handles[::n])
        if not body.get("stream"):
            if not await _collect_all(request, handles, choices):
                return Response(status_code=499)  # nobody reads it (nginx's "client closed request")
            out = []
            for i, (h, c) in enumerate(zip(handles, choices)):
                item = {"index": i, "finish_reason": c.finish_reason,
                        "logprobs": _logprobs(h, c, 0, len(c.token_ids), chat)}
                item.update({"message": {"role": "assistant", "content": c.text}} if chat else {"text": c.text})
                out.append(item)
            completion = sum(len(c.token_ids) for c in choices)
            _observe(handles, prompt_tokens, completion, t0)
            return JSONResponse({"id": rid, "object": obj, "created": created, "model": model_name, "choices": out,
                                 "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                                           "total_tokens": prompt_tokens + completion}})

        async def events():
            chunk_obj = "chat.completion.chunk" if chat else "text_completion"
            offsets = [0] * len(handles)  # completions' text_offset of the next token, per choice

            def chunk(i: int, text: str | None, finish: str | None, role: bool = False, logprobs=None) -> str:
                if chat:
                    delta: dict[str, Any] = {"role": "assistant"} if role else {}
                    if text is not None:
                        delta["content"] = text
                    item = {"index": i, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
                else:
                    item = {"index": i, "text": text or "", "finish_reason": finish, "logprobs": logprobs}
                data = {"id": rid, "object": chunk_obj, "created": created, "model": model_name, "choices": [item]}
                if include_usage:
                    data["usage"] = None
                return "data: " + json.dumps(data) + "\n\n"

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
                            kind = "server_shutting_down" if isinstance(event, ShuttingDown) else \
                                "invalid_request_error" if isinstance(event, ValueError) else "server_error"
                            message = str(event)[:MAX_ERROR_CHARS]
                            yield "data: " + json.dumps({"error": {"message": message, "type": kind, "param": None,
                                                                   "code": None}}) + "\n\n"
                            for f in pending:
                                f.cancel()
                            return
                        c = choices[i]
                        text = c.push(*event)
                        lp = None
                        if params.logprobs is not None and len(c.token_ids) > c.logprobs_sent:
                            lp = _logprobs(handles[i], c, c.logprobs_sent, len(c.token_ids), chat, offsets[i])
                            if not chat:
                                offsets[i] += sum(len(s) for s in lp["tokens"])
                            c.logprobs_sent = len(c.token_ids)
                        if text or c.finish_reason or lp is not None:
                            yield chunk(i, text, c.finish_reason, logprobs=lp)
                        if c.finish_reason is None:
                            pending[asyncio.ensure_future(handles[i].events.get())] = i
                        elif handles[i].request.finish_reason is None:
                            engine.cancel(handles[i])  # a stop string ended it
                completion = sum(len(c.token_ids) for c in choices)
                if include_usage:  # OpenAI's last chunk: no choices, the usage of the whole request
                    yield "data: " + json.dumps({
                        "id": rid, "object": chunk_obj, "created": created, "model": model_name, "choices": [],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                                  "total_tokens": prompt_tokens + completion}}) + "\n\n"
                _observe(handles, prompt_tokens, completion, t0)
                yield "data: [DONE]\n\n"
            finally:  # also on client disconnect (the response task is cancelled): free the blocks
                for h in handles:
                    engine.cancel(h)

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _run(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _run(request, chat=True)

    return app


# ------------------------------------------------------------------------------------------------------ serving
def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, bound before the model loads (a taken port fails in a second, not after
    the load). OSError with one line naming the address otherwise."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family = infos[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(infos[0][4])
        sock.listen(2048)
    except OSError as e:
        sock.close()
        hint = "; is another server running there? choose another --port" if e.errno in (98, 48, 10048) else ""
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}{hint}") from None
    sock.set_inheritable(True)
    return sock


def configure_logging(level: str) -> None:
    """modelgen.server / modelgen.access lines on stderr at ``level`` (the access log is at INFO)."""
    logger = logging.getLogger("modelgen")
    logger.setLevel(level.upper())
    if not any(getattr(h, "_modelgen", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler._modelgen = True
        logger.addHandler(handler)
    logger.propagate = False


def serve(llm: LLM, model_name: str, host: str = "127.0.0.1", port: int = 8000, max_waiting: int = 256, *,
          sock: socket.socket | None = None, api_key: str | None = None, chat_template: str | None = None,
          chat_template_source: str = "--chat-template", log_level: str = "info",
          shutdown_grace: float = 5.0, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """Serve until SIGINT / SIGTERM. ``sock``: an already bound socket (:func:`bind_socket`); else host:port.

    On the first signal the server stops accepting and refuses new requests (503); requests in flight may finish
    for ``shutdown_grace`` seconds, then each one still running is aborted (a stream gets an error event, a JSON
    request a 503) and the process exits. A second Ctrl-C aborts at once."""
    import uvicorn

    configure_logging(log_level)
    # llm.close(): the ranks --tensor-parallel-size started stop with the server (uvicorn re-raises a captured
    # SIGTERM once it has shut down, so nothing after run() would be reached)
    app = create_app(llm, model_name, max_waiting, api_key=api_key, chat_template=chat_template,
                     chat_template_source=chat_template_source, on_shutdown=llm.close,
                     max_body_bytes=max_body_bytes)
    engine: EngineLoop = app.state.engine

    class _Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            first = not self.should_exit
            super().handle_exit(sig, frame)
            if first:
                engine.begin_shutdown()
                log.info("shutting down: %d request(s) in flight get %.1f s to finish", engine.in_flight(),
                         shutdown_grace)
                timer = threading.Timer(shutdown_grace, engine.abort_all)
                timer.daemon = True
                timer.start()
            else:
                engine.abort_all()

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level.lower(), access_log=False,
                            timeout_graceful_shutdown=shutdown_grace + 5, lifespan="on")
    if sock is None:
        sock = bind_socket(host, port)
    _Server(config).run(sockets=[sock])


# ------------------------------------------------------------------------------------------ KV-cache sizing (CLI)
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_kv_cache_memory(value: str) -> int | float:
    """``--kv-cache-memory``: bytes (``4000000000``, ``4GB``, ``4GiB``, ``512MiB``) as an int, or a fraction in
    (0, 1] of the device's memory as a float (``0.3``)."""
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", value)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"--kv-cache-memory {value!r}: expected bytes (e.g. 4000000000, 4GB, 512MiB) or a fraction "
                         f"in (0, 1] of the device memory (e.g. 0.3)")
    number = float(m.group(1))
    if not unit and number <= 1 and ("." in m.group(1) or number < 1):
        if number <= 0:
            raise ValueError(f"--kv-cache-memory {value!r}: a fraction must be in (0, 1]")
        return number
    size = int(number * _UNITS[unit])
    if size < 1:
        raise ValueError(f"--kv-cache-memory {value!r}: expected a positive number of bytes")
    return size


def kv_cache_options(value: str | None, device: str, checkpoint: str | Path | None) -> tuple[dict, str]:
    """LLM keyword arguments for ``--kv-cache-memory`` (None: the default) and a phrase saying how it was sized.

    The default holds ``max_num_seqs`` requests of ``max_model_len`` tokens, but takes at most as many bytes as the
    checkpoint's weights (and never fewer than one full-length request): a cache sized to the model, not a fixed
    count of tokens (32 x 4096 float32 tokens were 6.7 GB for a 135M-parameter model)."""
    import torch

    if value is not None:
        amount = parse_kv_cache_memory(value)
        if isinstance(amount, int):
            return {"kv_cache_memory": amount}, f"--kv-cache-memory {value}"
        if torch.device(device).type == "cuda":
            return {"gpu_memory_utilization": amount}, f"--kv-cache-memory {value} of the GPU (after the weights)"
        import os

        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return {"kv_cache_memory": int(total * amount)}, f"--kv-cache-memory {value} of {total / 1e9:.1f} GB RAM"
    weights = sum(f.stat().st_size for f in Path(checkpoint).glob("*.safetensors")) if checkpoint else 0
    if not weights:
        return {}, "default: max-num-seqs full-length requests"
    cap = max(weights, 64 << 20)
    return {"kv_cache_memory_cap": cap}, (f"default: max-num-seqs full-length requests, at most the weights' "
                                          f"{_size(cap)}; --kv-cache-memory to change")


def _size(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def kv_cache_summary(llm: LLM) -> str:
    """One line: blocks, tokens, bytes and how many full-length requests the cache holds."""
    blocks = llm.blocks
    spec = llm.model.get_kv_spec().paged()
    size = spec.bytes_per_block(blocks.block_size) * blocks.num_blocks
    tokens = blocks.num_blocks * blocks.block_size
    return (f"KV cache {blocks.num_blocks} blocks x {blocks.block_size} tokens = {tokens} tokens, {_size(size)}; "
            f"max-model-len {llm.max_model_len} ({tokens / llm.max_model_len:.1f} full-length requests)")
