"""Each default of the daemon's settings is written once: in device/config.py, or in the one lower-level
type that config.py takes it from (EngineConfig.threads, WindowPolicy.n_keep)."""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import edgellm
from edgellm.device.config import DaemonConfig

SRC = Path(edgellm.__file__).parent
# Where a daemon setting could be repeated: the daemon, the engine package under it, the platform
# choice above it and the command that changes it at run time. (host/ and gateway/ have settings of
# their own, e.g. their own --host.)
SCANNED = [
    *(SRC / "device").rglob("*.py"),
    *(SRC / "engine").rglob("*.py"),
    SRC / "platforms.py",
    SRC / "client" / "commands" / "config.py",
    SRC / "cli.py",
]
TRIVIAL = (None, False, True, 0, 0.0, "", ())  # "unset" values, written wherever a setting is optional


def _defaults() -> dict[str, object]:
    config = DaemonConfig()
    out = {}
    for section in (s for s in dataclasses.fields(DaemonConfig) if "section" in s.metadata):
        for f in dataclasses.fields(getattr(config, section.name)):
            if f.default is not dataclasses.MISSING and f.default not in TRIVIAL:
                out[f.name] = f.default
    return out


def _bindings(tree: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) of every parameter default, annotated assignment and keyword argument."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            pos = a.posonlyargs + a.args
            yield from zip((x.arg for x in pos[len(pos) - len(a.defaults) :]), a.defaults, strict=True)
            yield from ((x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            yield node.target.id, _field_default(node.value)
        elif isinstance(node, ast.Call):
            yield from ((k.arg, k.value) for k in node.keywords if k.arg)


def _field_default(value: ast.expr) -> ast.expr:
    """`field(default=X, ...)` -> X; any other value as it is."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "field":
        return next((k.value for k in value.keywords if k.arg == "default"), value)
    return value


def _literal_default_places(defaults: dict[str, object]) -> Counter[str]:
    """How often each setting's default is written as a literal bound to the setting's name."""
    seen: Counter[str] = Counter()
    for path in SCANNED:
        for name, value in _bindings(ast.parse(path.read_text(), str(path))):
            if name not in defaults:
                continue
            try:
                literal = ast.literal_eval(value)
            except ValueError:
                continue
            if literal == defaults[name] and type(literal) is type(defaults[name]):
                seen[f"{name}={literal!r}"] += 1
    return seen


def test_no_default_of_the_daemon_settings_is_written_twice_in_the_source() -> None:
    defaults = _defaults()
    assert {"queue_size", "max_new_tokens_cap", "warmup_tokens", "threads", "n_keep"} <= defaults.keys()
    twice = {k: n for k, n in _literal_default_places(defaults).items() if n > 1}
    assert not twice, f"written more than once (take it from DaemonConfig instead): {twice}"


def test_the_scan_finds_a_second_copy(tmp_path: Path) -> None:
    """The check above is not vacuous: the defaults it knows are found where they are written."""
    seen = _literal_default_places(_defaults())
    assert seen["queue_size=8"] == 1 and seen["threads=2"] == 1 and seen["n_keep=4"] == 1
    copy = ast.parse("def serve(queue_size: int = 8) -> None: ...")
    assert [n for n, v in _bindings(copy) if ast.literal_eval(v) == 8] == ["queue_size"]
