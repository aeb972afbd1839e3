"""Conversations → device sessions, so a new turn reuses the device's KV cache.

OpenAI clients resend the whole conversation each turn. When a chat finishes, the gateway remembers
a fingerprint of the conversation including its answer; a later request whose messages start with
a remembered conversation gets that conversation's device session, and the device prefills only
the new turn. A client can also name its session (header `X-Session-Id`). Fingerprints are scoped
by `user`, so two users never share one.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import OrderedDict
from collections.abc import Sequence

Message = tuple[str, str]
PREFIX = "gw-"


def _digests(namespace: str, messages: Sequence[Message]) -> list[str]:
    """Digest of messages[:k] for k = 1..len(messages) (one pass)."""
    h = hashlib.sha256(namespace.encode())
    out = []
    for role, content in messages:
        h.update(json.dumps([role, content]).encode())
        out.append(h.copy().hexdigest())
    return out


class SessionMap:
    """An LRU of conversation fingerprint → session id."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._by_digest: OrderedDict[str, str] = OrderedDict()

    def session_for(self, messages: Sequence[Message], user: str = "", explicit: str = "") -> str:
        """The session of the longest remembered conversation these messages extend, else a new one."""
        if explicit:
            return f"{PREFIX}h-{explicit}"
        for digest in reversed(_digests(user, messages)[:-1]):
            session = self._by_digest.pop(digest, None)
            if session is not None:
                return session
        return f"{PREFIX}{uuid.uuid4().hex[:16]}"

    def remember(self, session: str, messages: Sequence[Message], answer: str, user: str = "") -> None:
        """Record the conversation with its answer, for the next turn to find."""
        digest = _digests(user, [*messages, ("assistant", answer)])[-1]
        self._by_digest[digest] = session
        self._by_digest.move_to_end(digest)
        while len(self._by_digest) > self.capacity:
            self._by_digest.popitem(last=False)

    def __len__(self) -> int:
        return len(self._by_digest)
