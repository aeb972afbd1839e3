"""The completion endpoints: an OpenAI request in, a daemon Generate call, an OpenAI answer out."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from edgellm.client.aio import AioDaemon
from edgellm.client.params import GenerateParams
from edgellm.client.sampling import for_model
from edgellm.common.json_depth import too_deep
from edgellm.common.logs import get_logger
from edgellm.gateway import upstream
from edgellm.gateway.config import Limits
from edgellm.gateway.device import DeviceWatch
from edgellm.gateway.errors import ApiError, from_rpc_error, invalid
from edgellm.gateway.limits import read_body
from edgellm.gateway.logprob_replies import chat_content, chat_logprobs, legacy_logprobs, prompt_text
from edgellm.gateway.metrics import GatewayMetrics
from edgellm.gateway.params import Kind, Parsed, parse
from edgellm.gateway.replies import FINISH, Shaper, combined
from edgellm.gateway.sessions import SessionMap
from edgellm.gateway.sse import DONE, EventStream, event
from edgellm.gateway.tools.parsers import Parsed as Calls
from edgellm.gateway.tools.parsers import opens_call, parse_calls
from edgellm.gateway.tools.prompt import history_text
from edgellm.gateway.tools.stream import Gate, call_deltas
from edgellm.gateway.tools.template import tool_template
from edgellm.gateway.upstream import Stream
from edgellm.v1 import common_pb2, device_pb2

log = get_logger(__name__)
# Deeper request bodies are refused before parsing (L2); OpenAI requests nest under 10 levels, and a
# response_format schema is checked against its own limit on the device.
MAX_BODY_DEPTH = 128
SESSION_HEADER = "x-session-id"
FALLBACK_MAX_TOKENS = 256  # until the first GetStatus tells the daemon's cap


class Completions:
    """Serves /v1/chat/completions and /v1/completions against one daemon."""

    def __init__(
        self,
        daemon: AioDaemon,
        watch: DeviceWatch,
        metrics: GatewayMetrics,
        sessions: SessionMap,
        limits: Limits | None = None,
    ) -> None:
        self.daemon = daemon
        self.watch = watch
        self.metrics = metrics
        self.sessions = sessions
        self.limits = limits or Limits()

    async def handle(self, kind: Kind, request: Request) -> Response:
        """Answer one completion request (streamed or whole)."""
        started = time.perf_counter()
        endpoint = "chat" if kind == "chat" else "completions"
        request_id = uuid.uuid4().hex[:24]
        try:
            response = await self._handle(kind, request, endpoint, started, request_id)
        except ApiError as err:
            self.metrics.answered(endpoint, err.status, started)
            return JSONResponse(err.body(), status_code=err.status, headers=err.headers())
        except Exception:  # a bug must still answer in OpenAI's shape, and say nothing of its insides
            log.exception("gateway_failed", request_id=request_id)
            self.metrics.answered(endpoint, 500, started)
            failed = ApiError(
                500, f"the gateway failed (request id {request_id}; its log has the details)",
                code="internal_error", kind="server_error",
            )  # fmt: skip
            return JSONResponse(failed.body(), status_code=500)
        if not isinstance(response, EventStream):
            self.metrics.answered(endpoint, response.status_code, started)
        return response

    async def _handle(
        self, kind: Kind, request: Request, endpoint: str, started: float, request_id: str
    ) -> Response:
        raw = await read_body(request, self.limits.max_body_bytes)
        nested = invalid(f"the request body is nested too deeply (at most {MAX_BODY_DEPTH} levels)")
        if too_deep(raw, MAX_BODY_DEPTH):
            raise nested
        try:
            body = json.loads(raw)
        except RecursionError:  # L2: json.loads recurses once per nesting level
            raise nested from None
        except ValueError as err:  # not JSON, not UTF-8, or an int of over 4,300 digits
            raise invalid(f"the request body is not valid JSON: {str(err)[:200]}") from None
        model = await self._loaded_model()
        try:
            parsed = parse(
                kind, body, self._max_tokens_cap(), self.limits, for_model(model), tool_template(model)
            )
        except RecursionError:  # comparing or re-encoding a body parsed just under the limit
            raise nested from None
        # The caller's key as sent (the guard already checked it): sessions are scoped to it.
        scope = self.sessions.scope(request.headers.get("authorization", ""), parsed.user)
        explicit = request.headers.get(SESSION_HEADER, "")
        session_id = parsed.params.session_id
        if kind == "chat" or explicit:
            messages = parsed.messages if kind == "chat" else ()
            session_id = self.sessions.session_for(messages, scope, explicit)
        parsed = parsed.with_ids(request_id, session_id)
        req = parsed.request
        shaper = Shaper(
            kind,
            req.request_id,
            parsed.model or self._model_name(),
            parsed.include_usage,
            # L4: with an id the client chose, how much of the prompt was cached would tell it how
            # much of that session's conversation it guessed right; say nothing about it.
            report_cache=not explicit,
        )
        self.metrics.begin()
        try:
            stream = await Stream.open(self.daemon, req)
        except grpc.aio.AioRpcError as err:
            self.metrics.end()
            raise await self._api_error(err, req.request_id, parsed) from None
        except BaseException:
            self.metrics.end()
            raise
        self.metrics.first_token(endpoint, started)
        if parsed.stream:  # ended by the events' `finally`, or on_close if they never started
            return EventStream(
                self._events(stream, shaper, parsed, endpoint, started, scope),
                on_close=lambda: self._closed(stream, endpoint, 499, started),
            )
        try:
            return await self._whole(stream, shaper, parsed, request, scope)
        finally:
            self.metrics.end()

    # -- whole answers -------------------------------------------------------------------------------
    async def _whole(
        self, stream: Stream, shaper: Shaper, parsed: Parsed, request: Request, scope: str
    ) -> Response:
        """The answer to every prompt of the request (a completion's list: one Generate each, in turn)."""
        answers = []
        for i, params in enumerate(parsed.batch):
            if i:
                stream = await self._open_next(params, i)
            answer = await self._answer(stream, shaper, replace(parsed, params=params), request, scope)
            if answer is None:
                return Response(status_code=499)
            answers.append(answer)
        return JSONResponse(answers[0] if len(answers) == 1 else combined(answers))

    async def _open_next(self, params: GenerateParams, i: int) -> Stream:
        request_id = f"{params.request_id}-{i}"
        try:
            return await Stream.open(self.daemon, replace(params, request_id=request_id).to_proto())
        except grpc.aio.AioRpcError as err:
            raise await self._api_error(err, request_id) from None

    async def _answer(
        self, stream: Stream, shaper: Shaper, parsed: Parsed, request: Request, scope: str
    ) -> dict[str, Any] | None:
        """One prompt's answer; None when the client left (the device is stopped)."""
        collect = asyncio.ensure_future(_collect(stream))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if collect not in done:  # the client left: stop the device, answer no one
            stream.cancel()
            collect.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await collect
            log.info("client_disconnected", request_id=shaper.id)
            return None
        try:
            got = collect.result()
        except grpc.aio.AioRpcError as err:
            raise await self._api_error(err, parsed.params.request_id) from None
        calls = _calls(parsed, got.text, got.last)
        self._finished(parsed, got.text, got.last, scope, calls)
        text, logprobs = got.text, None
        if parsed.scoring.echo:
            text = (parsed.params.prompt or prompt_text(got.prompt)) + text
        if parsed.scoring.top is not None:
            logprobs = (
                chat_logprobs(got.logprobs)
                if parsed.kind == "chat"
                else legacy_logprobs([*got.prompt, *got.logprobs])
            )
        return shaper.whole(text, _finish(got.last, calls), got.last.stats, calls, logprobs)

    # -- streams -------------------------------------------------------------------------------------
    async def _events(
        self,
        stream: Stream,
        shaper: Shaper,
        parsed: Parsed,
        endpoint: str,
        started: float,
        scope: str,
    ) -> AsyncGenerator[bytes]:
        parts: list[str] = []
        first = True
        status = 200
        # Why a gate with tools: whether the answer is a call is known only from its start; a call
        # is held to its end and sent as deltas (tools/stream.py), text streams once it is text.
        gate = Gate() if parsed.tools is not None else None
        # logprobs ride on the text chunks
        scores = _Pending(parsed.scoring.top is not None, legacy=parsed.kind == "completion")
        echo = _Echo(parsed) if parsed.scoring.echo else None
        try:
            async for msg in stream.messages():
                if echo is not None:  # the prompt, whole, is the first chunk
                    if not echo.add(msg):
                        continue  # a message of prompt logprobs only
                    yield event(shaper.chunk(echo.text, logprobs=echo.logprobs(scores)))
                    echo, first = None, False
                parts.append(msg.text)
                scores.add(msg)
                send = msg.text if gate is None else gate.feed(msg.text)
                if _sendable(send, first):
                    yield event(shaper.chunk(send, first=first, logprobs=scores.take(send)))
                    first = False
                if msg.finish_reason:
                    calls = _calls(parsed, "".join(parts), msg)
                    for chunk in _ending(shaper, parsed, "".join(parts), msg, scores, first, calls):
                        yield event(chunk)
                    self._finished(parsed, "".join(parts), msg, scope, calls)
            yield DONE
        except grpc.aio.AioRpcError as err:  # after the first token: the status line is sent already
            api = await self._api_error(err, parsed.params.request_id)
            status = api.status
            yield event(api.body())
            yield DONE
        except BaseException:
            status = 499  # cancelled: the client went away
            raise
        finally:
            self._closed(stream, endpoint, status, started)

    def _closed(self, stream: Stream, endpoint: str, status: int, started: float) -> None:
        """A streamed request ends (once): cancel upstream if still running, count the answer."""
        if stream.close():
            self.metrics.end()
            self.metrics.answered(endpoint, status, started)

    # -- shared ----------------------------------------------------------------------------------------
    def _finished(
        self, parsed: Parsed, text: str, last: device_pb2.GenerateResponse, scope: str, calls: Calls | None
    ) -> None:
        self.metrics.finished(last.stats)
        if parsed.kind == "chat" and last.finish_reason != device_pb2.FINISH_REASON_CANCELLED:
            # Why the calls' history text, not the model's: the fingerprint is of the messages as
            # the gateway folds them (params.py), and the client sends an answer with calls back as
            # content + tool_calls, which fold to that text whatever syntax the model wrote.
            answer = text if calls is None or not calls.calls else history_text(calls.content, calls.calls)
            self.sessions.remember(parsed.params.session_id, parsed.messages, answer, scope)

    async def _api_error(
        self, err: grpc.aio.AioRpcError, request_id: str, parsed: Parsed | None = None
    ) -> ApiError:
        loaded = None
        if err.code() == grpc.StatusCode.FAILED_PRECONDITION:
            loaded = await upstream.model_loaded(self.daemon)
        api = from_rpc_error(err, loaded, request_id)
        if api.status == 400 and parsed is not None and parsed.params.constraint is not None:
            # The device refuses what it cannot enforce; name the field that asked for it.
            api.param = "response_format" if parsed.tools is None else "tools"
        log.info(
            "daemon_refused", request_id=request_id, code=err.code().name, details=err.details(),
            http_status=api.status,
        )  # fmt: skip
        return api

    def _max_tokens_cap(self) -> int:
        st = self.watch.status
        return st.max_new_tokens_cap if st is not None and st.max_new_tokens_cap else FALLBACK_MAX_TOKENS

    async def _loaded_model(self) -> common_pb2.ArtifactInfo | None:
        """The loaded model from the cached status: its sampling defaults (sampling.for_model) and
        chat template (tools/template.py) shape the request.

        Until the watch's first GetStatus, asked now: a request in the gateway's first second must
        not get another model's defaults. A daemon that does not answer gives None (RECOMMENDED
        defaults, the fallback tool prompt); the Generate call then reports what is wrong.
        """
        st = self.watch.status
        if st is None:
            with contextlib.suppress(grpc.aio.AioRpcError):
                st = await upstream.status(self.daemon)
        return st.model if st is not None and st.HasField("model") else None

    def _model_name(self) -> str:
        st = self.watch.status
        return st.model.name if st is not None and st.HasField("model") else "edgellm"


def _calls(parsed: Parsed, text: str, last: device_pb2.GenerateResponse) -> Calls | None:
    """The tool calls in a finished answer (None without tools, or when it was cut short)."""
    if parsed.tools is None or last.finish_reason != device_pb2.FINISH_REASON_STOP or not opens_call(text):
        return None
    return parse_calls(text, {f.name for f in parsed.tools.allowed()}, parsed.syntax)


def _finish(last: device_pb2.GenerateResponse, calls: Calls | None) -> str:
    return "tool_calls" if calls is not None and calls.calls else FINISH.get(last.finish_reason, "stop")


def _sendable(send: str | None, first: bool) -> TypeGuard[str]:
    """Whether a stream sends a chunk now: text, or the first (role) chunk; None is held back."""
    return send is not None and (bool(send) or first)


def _ending(
    shaper: Shaper,
    parsed: Parsed,
    text: str,
    msg: device_pb2.GenerateResponse,
    scores: _Pending,
    first: bool,
    calls: Calls | None,
) -> list[dict[str, Any]]:
    """A stream's last chunks: what a tool answer still owes, the finish chunk, and the usage."""
    out = _held(shaper, text, calls, first)
    out.append(shaper.chunk("", _finish(msg, calls), stats=msg.stats, logprobs=scores.take("")))
    if parsed.include_usage:
        out.append(shaper.usage_chunk(msg.stats))
    return out


def _held(shaper: Shaper, text: str, calls: Calls | None, first: bool) -> list[dict[str, Any]]:
    """What a tool answer still owes at its end: the role chunk and the held text, or its calls as
    deltas (nothing when it streamed as text)."""
    if not first:
        return []
    out = [shaper.chunk("", first=True)]
    if calls is None or not calls.calls:
        return out + ([shaper.chunk(text)] if text else [])
    return out + [shaper.delta_chunk(delta) for delta in call_deltas(calls)]


class _Pending:
    """Generated tokens' logprobs not yet sent in a stream chunk (nothing to do when not asked):
    chat's `content` entries, or the legacy lists with offsets into the text streamed so far."""

    def __init__(self, on: bool, legacy: bool) -> None:
        self.on, self.legacy = on, legacy
        self.entries: list[device_pb2.TokenLogprob] = []
        self.offset = 0  # characters sent before this chunk (legacy text_offset)

    def add(self, msg: device_pb2.GenerateResponse) -> None:
        if self.on:
            self.entries.extend(msg.logprobs)

    def take(self, text: str) -> dict[str, Any] | None:
        """The `logprobs` of a chunk sending TEXT (None when there is nothing to send)."""
        if not self.entries:
            return None
        if self.legacy:
            out = legacy_logprobs(self.entries, self.offset)
        else:
            out = {"content": chat_content(self.entries), "refusal": None}
        self.offset += len(text)
        self.entries = []
        return out


class _Echo:
    """A streamed completion's echoed prompt: its tokens' logprobs gathered from the device's first
    messages (they all come before any generated token), sent as the stream's first chunk."""

    def __init__(self, parsed: Parsed) -> None:
        self.prompt = parsed.params.prompt
        self.entries: list[device_pb2.TokenLogprob] = []
        self.text = ""

    def add(self, msg: device_pb2.GenerateResponse) -> bool:
        """Take MSG's prompt entries; True once the prompt is complete (MSG generated or finished)."""
        self.entries.extend(msg.prompt_logprobs)
        done = bool(msg.text or msg.logprobs or msg.finish_reason)
        if done:
            self.text = self.prompt or prompt_text(self.entries)
        return done

    def logprobs(self, scores: _Pending) -> dict[str, Any] | None:
        """The prompt's legacy lists (None when logprobs were not asked); SCORES' offsets start after it."""
        scores.offset = len(self.text)
        return legacy_logprobs(self.entries) if scores.on else None


@dataclass
class _Collected:
    """A whole answer from the device: its text, last message and logprobs (when asked)."""

    text: str
    last: device_pb2.GenerateResponse
    logprobs: list[device_pb2.TokenLogprob]
    prompt: list[device_pb2.TokenLogprob]


async def _collect(stream: Stream) -> _Collected:
    parts: list[str] = []
    out = _Collected("", stream.first, [], [])
    async for msg in stream.messages():
        parts.append(msg.text)
        out.last = msg
        if msg.logprobs or msg.prompt_logprobs:  # only a request that asked gets any
            out.logprobs.extend(msg.logprobs)
            out.prompt.extend(msg.prompt_logprobs)
    out.text = "".join(parts)
    return out


async def _disconnected(request: Request) -> None:
    """Return when the client closes the connection (the body has been read already)."""
    receive: Any = request.receive
    while (await receive())["type"] != "http.disconnect":
        pass
