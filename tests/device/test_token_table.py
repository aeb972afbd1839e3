"""The token byte table round-trips and rejects damaged files."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgellm.common.token_table import TokenTable, write_token_table


def test_round_trip(tmp_path: Path) -> None:
    pieces = [b"", b"a", "日".encode(), b"\xe6", b"<|im_end|>"]
    write_token_table(pieces, tmp_path / "t.bin")
    table = TokenTable(tmp_path / "t.bin")
    assert len(table) == len(pieces)
    assert [table.bytes_of(i) for i in range(len(pieces))] == pieces
    assert table.bytes_of(99) == b""


def test_truncated_and_bad_magic_are_refused(tmp_path: Path) -> None:
    write_token_table([b"abc", b"def"], tmp_path / "t.bin")
    data = (tmp_path / "t.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-1])
    (tmp_path / "bad.bin").write_bytes(b"XXXX" + data[4:])
    for name in ("cut.bin", "bad.bin"):
        with pytest.raises(ValueError, match=r"bad magic|truncated"):
            TokenTable(tmp_path / name)
