"""OpenAI response objects: whole completions, stream chunks and usage, from the daemon's messages."""

from __future__ import annotations

import time
from typing import Any

from edgellm.gateway.params import Kind
from edgellm.gateway.tools.parsers import Parsed as Calls
from edgellm.v1 import device_pb2

# The daemon's finish reasons as OpenAI names them (CONTEXT: the context bounded the answer).
FINISH = {
    device_pb2.FINISH_REASON_STOP: "stop",
    device_pb2.FINISH_REASON_LENGTH: "length",
    device_pb2.FINISH_REASON_CONTEXT: "length",
    device_pb2.FINISH_REASON_CANCELLED: "stop",
}


def usage(stats: device_pb2.GenerateStats, report_cache: bool = True) -> dict[str, Any]:
    """OpenAI usage; cached_tokens are the prompt tokens the device's session cache already held
    (left out when REPORT_CACHE is false: a client-named session, where it would be a prefix oracle)."""
    out: dict[str, Any] = {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "total_tokens": stats.prompt_tokens + stats.completion_tokens,
    }
    if report_cache:
        out["prompt_tokens_details"] = {"cached_tokens": max(stats.prompt_tokens - stats.prefilled_tokens, 0)}
    return out


def timings(stats: device_pb2.GenerateStats, report_cache: bool = True) -> dict[str, Any]:
    """llama-server's `timings` extension, as the device measured them (queue_ms is edgellm's own).

    prompt_ms is the device's TTFT less its queue wait; predicted_* cover the tokens after the first.
    Without REPORT_CACHE the prompt_* figures (they count the tokens prefilled) are left out.
    """
    prompt_ms = max(stats.ttft_ms - stats.queue_ms, 0.0)
    predicted_ms = max(stats.total_ms - stats.ttft_ms, 0.0)
    predicted_n = max(stats.completion_tokens - 1, 0)
    prompt = {
        "prompt_n": stats.prefilled_tokens,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_second": round(stats.prefill_tokens_per_second, 3),
    }
    return {
        **(prompt if report_cache else {}),
        "predicted_n": predicted_n,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_second": round(stats.decode_tokens_per_second, 3),
        "queue_ms": round(stats.queue_ms, 3),
    }


class Shaper:
    """Builds every object of one answer with the same id, creation time and model name."""

    def __init__(
        self, kind: Kind, request_id: str, model: str, include_usage: bool = False, report_cache: bool = True
    ) -> None:
        self.report_cache = report_cache
        self.kind = kind
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + request_id
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(
        self,
        text: str,
        finish: str,
        stats: device_pb2.GenerateStats,
        calls: Calls | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A non-streamed answer (with CALLS: its text and tool calls as read from TEXT; LOGPROBS:
        the choice's logprobs object, logprob_replies.py)."""
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
            if calls is not None and calls.calls:
                message["content"] = calls.content
                message["tool_calls"] = [c.openai() for c in calls.calls]
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish,
            }
            head = self._head("chat.completion")
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
            head = self._head("text_completion")
        return {
            **head,
            "choices": [choice],
            "usage": usage(stats, self.report_cache),
            "timings": timings(stats, self.report_cache),
        }

    def chunk(
        self,
        text: str,
        finish: str | None = None,
        first: bool = False,
        stats: device_pb2.GenerateStats | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One stream chunk: a text delta, or (with finish) the closing choice and its timings."""
        if self.kind == "chat":
            delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {}
            if text and not first:
                delta["content"] = text
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "logprobs": logprobs,
                "finish_reason": finish,
            }
            out = {**self._head("chat.completion.chunk"), "choices": [choice]}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
            out = {**self._head("text_completion"), "choices": [choice]}
        if self.include_usage:
            out["usage"] = None
        if stats is not None:
            out["timings"] = timings(stats, self.report_cache)
        return out

    def delta_chunk(self, delta: dict[str, Any]) -> dict[str, Any]:
        """A chat stream chunk carrying DELTA as it is (tool_calls entries)."""
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        out = {**self._head("chat.completion.chunk"), "choices": [choice]}
        if self.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, stats: device_pb2.GenerateStats) -> dict[str, Any]:
        """The last chunk when stream_options.include_usage: no choices, the usage."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage(stats, self.report_cache)}


def combined(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """One answer holding each answer's choice at its index (a completion's list of prompts), with
    their usage summed (timings: the last prompt's)."""
    out = dict(answers[-1])
    out["choices"] = [{**a["choices"][0], "index": i} for i, a in enumerate(answers)]
    usage_sum: dict[str, Any] = {k: 0 for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    for a in answers:
        for key in usage_sum:
            usage_sum[key] += a["usage"][key]
    out["usage"] = usage_sum
    return out
