"""Conversations → device sessions, so a new turn reuses the device's KV cache.

OpenAI clients resend the whole conversation each turn. When a chat finishes, the gateway remembers
a fingerprint of the conversation including its answer; a later request whose messages start with
a remembered conversation gets that conversation's device session, and the device prefills only
the new turn. A client can also name its session (header `X-Session-Id`).

Everything is scoped to the caller: its API key (as it sent it) and `user`. An explicit id becomes
`gw-h-` + HMAC(per-gateway secret, key, user, id), so two callers with different keys never reach
one device session by choosing the same id (L4), and the device never sees the client's id.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
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

    def __init__(self, capacity: int = 256, secret: bytes | None = None) -> None:
        self.capacity = capacity
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self._by_digest: OrderedDict[str, str] = OrderedDict()

    def scope(self, caller: str, user: str = "") -> str:
        """The namespace of one caller (its key as sent) and `user`: an HMAC, so no key is kept."""
        return hmac.new(self._secret, json.dumps([caller, user]).encode(), hashlib.sha256).hexdigest()

    def session_for(self, messages: Sequence[Message], scope: str = "", explicit: str = "") -> str:
        """The session of the longest remembered conversation these messages extend, else a new one.

        SCOPE comes from `scope()`; EXPLICIT is the client's X-Session-Id, bound to SCOPE.
        """
        if explicit:
            bound = hmac.new(self._secret, json.dumps([scope, explicit]).encode(), hashlib.sha256)
            return f"{PREFIX}h-{bound.hexdigest()[:32]}"
        for digest in reversed(_digests(scope, messages)[:-1]):
            session = self._by_digest.pop(digest, None)
            if session is not None:
                return session
        return f"{PREFIX}{uuid.uuid4().hex[:16]}"

    def remember(self, session: str, messages: Sequence[Message], answer: str, scope: str = "") -> None:
        """Record the conversation with its answer, for the next turn (in the same SCOPE) to find."""
        digest = _digests(scope, [*messages, ("assistant", answer)])[-1]
        self._by_digest[digest] = session
        self._by_digest.move_to_end(digest)
        while len(self._by_digest) > self.capacity:
            self._by_digest.popitem(last=False)

    def __len__(self) -> int:
        return len(self._by_digest)
