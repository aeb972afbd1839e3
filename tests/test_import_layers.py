"""The import layers of docs/architecture.md hold, checked by import-linter's contracts.

The contracts live in pyproject.toml ([tool.importlinter]); `make lint` runs the same check. Each
`ignore_imports` entry there is a known wrong-way edge (issue 27); any new one fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import edgellm

SRC = Path(edgellm.__file__).parent.parent
CONFIG = Path(__file__).parent.parent / "pyproject.toml"
CONTRACTS = len(tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["contracts"])

# import-linter's own entry point, in a fresh interpreter so `edgellm` resolves to the given tree.
LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(sys.argv[1], no_cache=True, no_logo=True))"
)


def lint_imports(src: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """Runs the contracts of `config` on the `edgellm` package under `src`."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [sys.executable, "-c", LINT, str(config)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_package_keeps_every_import_contract() -> None:
    result = lint_imports(SRC, CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{CONTRACTS} kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "target", "contract", "broken"),
    [
        ("common/upward.py", "edgellm.device.generation", "Programs", 1),
        ("engine/upward.py", "edgellm.device.generation", "Programs", 1),
        ("host/upward.py", "edgellm.client.client", "Programs", 1),
        ("client/upward.py", "edgellm.host.jobs", "Programs", 1),
        ("device/governor/upward.py", "edgellm.device.core.daemon", "Inside the daemon", 1),
        ("gateway/upward.py", "edgellm.engine.artifact", "The gateway reaches the daemon", 1),
        # A building block (here written over an existing one) may not reach up to the builder.
        ("host/quantize/grid.py", "edgellm.host.builder.pipeline", "Inside the host", 1),
        ("host/builder/pipeline.py", "edgellm.host.quantize.auto", "Inside the host", 1),
        # The daemon reaching up into the simulator breaks the program layers and the sim contract.
        ("device/governor/upward.py", "edgellm.sim.plant", "Programs", 2),
    ],
)
def test_a_new_wrong_way_import_breaks_the_contract_and_is_named(
    tmp_path: Path, module: str, target: str, contract: str, broken: int
) -> None:
    copy = tmp_path / "src" / "edgellm"
    shutil.copytree(SRC / "edgellm", copy, ignore=shutil.ignore_patterns("__pycache__", "*.gz"))
    (copy / module).write_text(f"import {target}\n")
    shutil.copy(CONFIG, tmp_path / "pyproject.toml")

    result = lint_imports(tmp_path / "src", tmp_path / "pyproject.toml")

    importer = "edgellm." + module.removesuffix(".py").replace("/", ".")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{CONTRACTS - broken} kept, {broken} broken" in result.stdout
    named = result.stdout.split("Broken contracts", 1)[1]
    assert named.lstrip("-\n").startswith(contract)
    assert f"{importer} -> {target}" in named


def _programs_rows() -> list[set[str]]:
    """The programs contract's rows, top first, as sets of top-level package names."""
    contracts = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["contracts"]
    programs = next(c for c in contracts if c["id"] == "programs")
    return [{m.strip().removeprefix("edgellm.") for m in row.split("|")} for row in programs["layers"]]


def _forbidden() -> set[tuple[str, str]]:
    """(importer, imported) pairs a forbidden contract names, as top-level package names."""
    contracts = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["contracts"]
    return {
        (src.removeprefix("edgellm."), dst.removeprefix("edgellm."))
        for c in contracts
        if c["type"] == "forbidden"
        for src in c["source_modules"]
        for dst in c["forbidden_modules"]
    }


def test_every_arrow_of_the_architecture_drawing_is_one_the_contract_allows() -> None:
    doc = (CONFIG.parent / "docs" / "architecture.md").read_text()
    drawing = doc.split("```mermaid", 1)[1].split("```", 1)[0]
    arrows = [
        (re.sub(r"\[.*", "", a).strip(), b.strip())
        for a, b in (line.split("-->") for line in drawing.splitlines() if "-->" in line)
    ]
    row = {pkg: i for i, names in enumerate(_programs_rows()) for pkg in names}
    assert len(arrows) >= 10
    for importer, imported in arrows:
        assert row[importer] < row[imported], f"{importer} --> {imported} runs up or sideways"
        assert (importer, imported) not in _forbidden(), f"{importer} --> {imported} is forbidden"
