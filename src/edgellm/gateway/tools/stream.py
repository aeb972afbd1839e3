"""A tool answer as OpenAI stream deltas: the text, then per call its id and name, then its arguments."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from edgellm.gateway.tools.parsers import Parsed, opens_call

ARGUMENT_CHUNK = 16  # characters of arguments per delta (OpenAI sends a few tokens' worth each)


def call_deltas(calls: Parsed) -> Iterator[dict[str, Any]]:
    """The deltas after the first (role) one: the content if any, then each call in pieces.

    A client that concatenates each index's `function.arguments` gets the non-streamed call back.
    """
    if calls.content:
        yield {"content": calls.content}
    for index, call in enumerate(calls.calls):
        head = call.openai(index)
        head["function"] = {"name": call.name, "arguments": ""}
        yield {"tool_calls": [head]}
        for start in range(0, len(call.arguments), ARGUMENT_CHUNK):
            piece = call.arguments[start : start + ARGUMENT_CHUNK]
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


class Gate:
    """Holds a tool answer's text until its start tells whether it is a call.

    A text answer streams from then on, token by token; a call is held to the end (its deltas
    then come from the parsed call, so they reassemble to exactly the non-streamed answer).
    """

    def __init__(self) -> None:
        self._held: list[str] = []
        self.text: bool | None = None  # None: undecided; True: a text answer; False: a call

    def feed(self, piece: str) -> str | None:
        """What to send now (None: hold)."""
        if self.text:
            return piece
        self._held.append(piece)
        if self.text is None:
            opens = opens_call("".join(self._held))
            self.text = None if opens is None else not opens
        if not self.text:
            return None
        out, self._held = "".join(self._held), []
        return out
