"""scripts/complexity.py: every function of src/ within the bound, boolean operators counted."""

from __future__ import annotations

from pathlib import Path

from scripts import complexity


def test_boolean_operators_count_where_mccabe_does_not(tmp_path: Path) -> None:
    # One `if` with eleven `and`s: McCabe (ruff C901) says 2, radon says 13.
    names = [f"x{i}" for i in range(12)]
    source = tmp_path / "dense.py"
    source.write_text(f"def dense({', '.join(names)}):\n    if {' and '.join(names)}:\n        return 1\n")
    found = complexity.offenders([source], 12)
    assert [(row[0], row[3]) for row in found] == [(13, "dense")]
    assert complexity.main(["--max", "12", str(source)]) == 1
    assert complexity.main(["--max", "13", str(source)]) == 0


def test_methods_are_counted_once(tmp_path: Path) -> None:
    body = "\n".join(f"        if x == {i}:\n            return {i}" for i in range(13))
    source = tmp_path / "cls.py"
    source.write_text(f"class C:\n    def m(self, x):\n{body}\n")
    assert [row[3] for row in complexity.offenders([source], 12)] == ["C.m"]


def test_every_function_of_the_package_is_within_the_bound() -> None:
    found = complexity.offenders(complexity.sources([complexity.ROOT / "src"]), complexity.DEFAULT_MAX)
    assert found == [], "\n".join(f"{p}:{line}: {name} ({c})" for c, p, line, name in found)
