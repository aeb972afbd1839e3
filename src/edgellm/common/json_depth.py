"""How deep a JSON text nests, found without parsing it (finding L2).

Why not catch json.loads' RecursionError: on CPython 3.11 a RecursionError caught in a thread can
leave that thread's recursion counters off, and a later `compile()` there (pytest's assertion
rewriting, `ast.parse`) then fails with "AST constructor recursion depth mismatch". Refusing deep
text before parsing never recurses at all, and costs a few milliseconds per MiB.
"""

from __future__ import annotations

import re
from itertools import accumulate

_STRING = re.compile(
    r'"(?:[^"\\]|\\.)*"', re.S
)  # a JSON string (escapes included): brackets inside don't count
_BRACKET = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting(text: str | bytes) -> int:
    """The deepest bracket nesting of TEXT outside strings (0 for a scalar)."""
    s = text.decode("utf-8", "replace") if isinstance(text, bytes | bytearray) else text
    if s.count("[") + s.count("{") == 0:
        return 0
    brackets = _BRACKET.findall(_STRING.sub('""', s))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def too_deep(text: str | bytes, limit: int) -> bool:
    """Whether TEXT nests deeper than LIMIT (cheap when it cannot: fewer brackets than LIMIT)."""
    s = text.decode("utf-8", "replace") if isinstance(text, bytes | bytearray) else text
    if s.count("[") + s.count("{") <= limit:
        return False
    return nesting(s) > limit
