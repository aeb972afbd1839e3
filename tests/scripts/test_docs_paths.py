"""The docs name no absolute path of one machine: every path a reader copies is relative to the checkout."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# An absolute path that starts one of these roots. The lookbehind lets a path *inside* another one
# through: /data/data/com.termux/files/home/... is where Termux lives on every phone, not one machine.
MACHINE_PATH = re.compile(r"(?<![\w./~-])/(?:work|root|home)/[^\s`'\")]*")


def machine_paths(text: str) -> list[str]:
    """The absolute one-machine paths in `text`, as 'line N: path'."""
    return [
        f"line {n}: {m.group(0)}"
        for n, line in enumerate(text.splitlines(), 1)
        for m in MACHINE_PATH.finditer(line)
    ]


def test_the_pattern_finds_machine_paths_and_lets_the_termux_home_through() -> None:
    found = machine_paths("run `/work/tools/bench x`\n(/home/me/venv)\nls /data/data/com.termux/files/home/x")
    assert found == ["line 1: /work/tools/bench", "line 2: /home/me/venv"]
    assert machine_paths("python3 -m venv .cache/bench-venvs/llama-cpp ~/home/ok") == []


def test_no_doc_or_readme_names_an_absolute_path_of_one_machine() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    bad = {str(p.relative_to(REPO)): hits for p in docs if (hits := machine_paths(p.read_text()))}
    assert not bad, f"write these relative to the checkout (or as a placeholder like <checkout>): {bad}"
