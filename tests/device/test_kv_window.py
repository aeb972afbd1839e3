"""Window policy: eviction ranges respect the protected prefix and message boundaries."""

from __future__ import annotations

import pytest

from edgellm.common.errors import FailedPrecondition, InvalidArgument
from edgellm.common.runtime import Runtime
from edgellm.engine.config import KvQuant, attention_mode
from edgellm.engine.kv_window import WindowPolicy, eviction_range, system_prompt_length

S, E, NL = 1, 2, 198  # <|im_start|>, <|im_end|>, "\n"


def test_plain_range_after_protected_prefix() -> None:
    tokens = list(range(100, 200))
    assert eviction_range(tokens, 4, 25) == (4, 29)


def test_end_moves_to_the_next_message_start() -> None:
    tokens = [S, 9, NL, *range(100, 140), E, NL, S, 10, NL, *range(200, 230)]
    at = tokens.index(S, 1)
    begin, end = eviction_range(tokens, 4, 30, turn_start=S)
    assert (begin, end) == (4, at)
    assert tokens[end] == S  # the kept part starts with a whole header


def test_end_never_lands_inside_a_header() -> None:
    tokens = [*range(100, 130), S, 10, NL, *range(200, 300)]
    _, end = eviction_range(tokens, 4, 28, turn_start=S)  # naive end = 32: inside "S 10 NL"
    assert tokens[end] == S or end <= 30
    assert end == 30


def test_system_prompt_length() -> None:
    tokens = [S, 9, NL, 5, 6, E, NL, S, 10]
    assert system_prompt_length(tokens, S, E) == 6
    assert system_prompt_length([5, 6, 7], S, E) == 0


@pytest.mark.parametrize(
    "policy",
    [
        WindowPolicy(window=32),
        WindowPolicy(window=512, n_keep=300),
        WindowPolicy(window=9000),
        WindowPolicy(window=512, method="magic"),  # type: ignore[arg-type]
        WindowPolicy(window=512, n_keep=-2),
    ],
)
def test_bad_policies_are_refused(policy: WindowPolicy) -> None:
    with pytest.raises(InvalidArgument):
        policy.validate(8192)


def test_default_chunk_is_a_quarter_window() -> None:
    assert WindowPolicy(window=512).evict_chunk == 128
    WindowPolicy(window=512, n_keep=4).validate(8192)


def test_int8_kv_refuses_to_slide_by_erase() -> None:
    """MNN 3.6.1 truncates a quantized KV cache at an erase: the daemon says so instead of loading."""
    with pytest.raises(FailedPrecondition, match="reprefill"):
        attention_mode(Runtime(), KvQuant.INT8, slides_by_erase=True)
    assert attention_mode(Runtime(), KvQuant.INT8, slides_by_erase=False) == 10
    assert attention_mode(Runtime(), KvQuant.FP, slides_by_erase=True) == 8
