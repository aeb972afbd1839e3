"""UpdateConfig's values are checked by the same types as the start flags (one limit, written once)."""

from __future__ import annotations

import pytest

from edgellm.common.errors import InvalidArgument
from edgellm.device.config import check_setting


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("kv_window", -1, "kv_window must be at least 0, got -1"),
        ("n_keep", -2, "n_keep must be at least -1, got -2"),
        ("threads", 0, "threads must be at least 1, got 0"),
        ("setpoint_c", 95.0, "setpoint_c must be between 20 and 90, got 95"),
        ("draft_max", 3, "draft_max must be one of 0, 1, 2, 4, 8, not 3"),
    ],
)
def test_a_value_the_flag_refuses_is_refused_naming_the_setting_and_its_range(
    name: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        check_setting(name, value)


def test_a_value_the_flag_takes_passes() -> None:
    for name, value in (("kv_window", 0), ("n_keep", -1), ("threads", 4), ("setpoint_c", 40.5)):
        check_setting(name, value)
