"""Cyclomatic complexity with boolean operators counted: every function ≤ the bound (issue 27).

ruff's C901 (McCabe ≤ 12, pyproject.toml) counts branches only, so `if a and b and c or d:` reads
as one decision. radon counts each boolean operator as the decision it is; this check holds every
function of `src/` to the same bound under that count. `make lint` and pre-commit run it;
tests/test_complexity.py shows it catches an offender.

    python scripts/complexity.py [--max 12] [PATH ...]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

DEFAULT_MAX = 12
ROOT = Path(__file__).resolve().parent.parent


def functions(blocks: Iterable[Function | Class]) -> Iterator[Function]:
    """Every function and method once, nested closures included.

    radon lists each method twice: flattened at top level and inside its class; the class copy is
    skipped.
    """
    for block in blocks:
        if isinstance(block, Function):
            yield block
            yield from functions(block.closures)


def offenders(paths: Iterable[Path], bound: int) -> list[tuple[int, Path, int, str]]:
    """(complexity, file, line, name) of each function above `bound`, worst first."""
    found = []
    for path in paths:
        for fn in functions(cc_visit(path.read_text(encoding="utf-8"))):
            if fn.complexity > bound:
                found.append((fn.complexity, path, fn.lineno, fn.fullname))
    return sorted(found, key=lambda row: (-row[0], str(row[1]), row[2]))


def sources(roots: Iterable[Path]) -> list[Path]:
    """The Python files under `roots`, generated protobuf stubs left out."""
    files: list[Path] = []
    for root in roots:
        candidates = [root] if root.is_file() else sorted(root.rglob("*.py"))
        files.extend(p for p in candidates if "_pb2" not in p.name)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=DEFAULT_MAX, help="the bound (default 12)")
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "src"])
    args = parser.parse_args(argv)
    found = offenders(sources(args.paths), args.max)
    for complexity, path, line, name in found:
        print(f"{path}:{line}: {name} has complexity {complexity} (> {args.max}, boolean operators counted)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
