"""argparse options generated from dataclass fields: a setting's flag, help and default live once.

As vLLM's `EngineArgs.add_cli_args`: a field's `metadata` (built with `option`) names its flag and
help; `add_options` adds one argparse option per such field with the field's default, and
`values_from` reads the parsed namespace back into field values for the dataclass. A config made
of sections (fields with `section` metadata, each a dataclass) gets one help group per section
(`add_sections`, `sections_from`). Each generated flag notes itself on the namespace when given,
so `given_settings` tells a flag the user typed from its default (`--threads 4` when 4 is the
default too): a setting saved at run time may override a default but not an explicit flag.
`check_value` applies a flag's type and choices to a value that
arrives another way (an RPC), so a limit is written once.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from edgellm.common.errors import InvalidArgument

# Metadata keys passed to argparse's add_argument unchanged.
_ARGPARSE_KEYS = ("type", "choices", "metavar")
# Namespace attribute: the dests of the generated flags given on the command line.
_GIVEN = "given_flags"


def _note_given(namespace: argparse.Namespace, dest: str) -> None:
    setattr(namespace, _GIVEN, getattr(namespace, _GIVEN, frozenset()) | {dest})


class _Store(argparse.Action):
    """argparse's `store`, noting the flag as given."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(ns, self.dest, values)
        _note_given(ns, self.dest)


class _Switch(argparse.Action):
    """argparse's `store_true`, noting the flag as given."""

    def __init__(
        self, option_strings: list[str], dest: str, default: Any = False, help: str | None = None
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, const=True, default=default, help=help)

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(ns, self.dest, True)
        _note_given(ns, self.dest)


def option(
    flag: str,
    help: str,
    *,
    type: Callable[[str], Any] | None = None,
    choices: tuple[Any, ...] | None = None,
    metavar: str | None = None,
    store_true: bool = False,
    negate: bool = False,
    env: str | None = None,
    unset_keeps_default: bool = False,
    parse: Callable[[Any], Any] | None = None,
    to_cli: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """Field metadata for one command-line flag.

    store_true: a switch that sets the field True; negate: a switch (e.g. --no-warmup) that sets it
    False. env: the default is read from this environment variable when set. unset_keeps_default:
    the flag defaults to None, which keeps the field's own default (e.g. a default_factory).
    parse: parsed value -> field value (not called on None); to_cli: field default -> flag default.
    """
    meta: dict[str, Any] = {"flag": flag, "help": help}
    if store_true or negate:
        meta["action"] = "store_true"
    extra = {
        "type": type,
        "choices": choices,
        "metavar": metavar,
        "env": env,
        "parse": parse,
        "to_cli": to_cli,
    }
    meta.update({k: v for k, v in extra.items() if v is not None})
    if negate:
        meta["negate"] = True
    if unset_keeps_default:
        meta["unset_keeps_default"] = True
    return meta


def enum_option(flag: str, help: str, kind: type[enum.Enum]) -> dict[str, Any]:
    """Field metadata for a flag that takes one of an enum's values and gives the field the member."""
    return option(flag, help, choices=tuple(m.value for m in kind), parse=kind)


def dest(meta: Mapping[str, Any]) -> str:
    """The namespace attribute argparse gives the flag (--time-scale -> time_scale)."""
    flag: str = meta["flag"]
    return flag.lstrip("-").replace("-", "_")


def add_option(p: argparse._ActionsContainer, meta: Mapping[str, Any], default: Any = None) -> None:
    """Add the flag `meta` describes; default: the value the flag has when not given."""
    kwargs = {k: meta[k] for k in _ARGPARSE_KEYS if k in meta}
    if "env" in meta:
        default = os.environ.get(meta["env"]) or default
    action = _Switch if meta.get("action") == "store_true" else _Store
    p.add_argument(meta["flag"], default=default, help=meta["help"], action=action, **kwargs)


def _fields_with_flags(cls: type[Any]) -> Iterator[dataclasses.Field[Any]]:
    return (f for f in dataclasses.fields(cls) if "flag" in f.metadata)


def _cli_default(f: dataclasses.Field[Any]) -> Any:
    meta = f.metadata
    if meta.get("unset_keeps_default") or f.default is dataclasses.MISSING:
        return None
    if meta.get("negate"):
        return not f.default
    if "to_cli" in meta:
        return meta["to_cli"](f.default)
    return f.default.value if isinstance(f.default, enum.Enum) else f.default


def add_options(p: argparse._ActionsContainer, cls: type[Any]) -> None:
    """One option per field of `cls` that has flag metadata, in field order, defaulting to the field's."""
    for f in _fields_with_flags(cls):
        add_option(p, f.metadata, _cli_default(f))


def values_from(cls: type[Any], ns: argparse.Namespace) -> dict[str, Any]:
    """Field values of `cls` from a namespace parsed with `add_options` (an unset flag is left out)."""
    values: dict[str, Any] = {}
    for f in _fields_with_flags(cls):
        meta = f.metadata
        value = getattr(ns, dest(meta))
        if meta.get("negate"):
            value = not value
        elif value is None:
            if meta.get("unset_keeps_default"):
                continue
        elif "parse" in meta:
            value = meta["parse"](value)
        values[f.name] = value
    return values


def given_settings(cls: type[Any], ns: argparse.Namespace) -> frozenset[str]:
    """Names of the fields of `cls` whose flags the command line gave (not those left at their default)."""
    given: frozenset[str] = getattr(ns, _GIVEN, frozenset())
    return frozenset(f.name for f in _fields_with_flags(cls) if dest(f.metadata) in given)


def section(title: str, description: str) -> dict[str, Any]:
    """Field metadata of a section: a nested dataclass whose flags form one argparse help group."""
    return {"section": title, "description": description}


def _sections(cls: type[Any]) -> Iterator[tuple[dataclasses.Field[Any], type[Any]]]:
    for f in dataclasses.fields(cls):
        if "section" in f.metadata:
            yield f, f.default_factory  # type: ignore[misc]  # a section's factory is its class


def add_sections(p: argparse.ArgumentParser, cls: type[Any]) -> None:
    """The options of every section of `cls`, one help group per section, in field order."""
    for f, section_cls in _sections(cls):
        add_options(p.add_argument_group(f.metadata["section"], f.metadata["description"]), section_cls)


def sections_from(cls: type[Any], ns: argparse.Namespace) -> dict[str, Any]:
    """Each section of `cls` built from a namespace parsed with `add_sections`, by field name."""
    return {f.name: section_cls(**values_from(section_cls, ns)) for f, section_cls in _sections(cls)}


def sections_given(cls: type[Any], ns: argparse.Namespace) -> frozenset[str]:
    """Names of the settings, across the sections of `cls`, whose flags the command line gave."""
    return frozenset().union(*(given_settings(section_cls, ns) for _, section_cls in _sections(cls)))


def check_value(name: str, meta: Mapping[str, Any], value: object) -> None:
    """Refuse (InvalidArgument naming `name`) a value the flag's type or choices would refuse."""
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise InvalidArgument(f"{name} must be one of {', '.join(map(str, choices))}, not {value!r}")
    kind = meta.get("type")
    if kind is None:
        return
    try:
        kind(str(value))  # the flag's own parser: the same limits and message as at start
    except (argparse.ArgumentTypeError, ValueError) as err:
        raise InvalidArgument(f"{name} {err}") from None
