"""JSON Schema objects closed by default: an object's `properties` are the keys an answer may use.

Why: JSON Schema lets an object carry any key its `properties` do not name unless the schema says
`"additionalProperties": false`, and llguidance follows the letter of that. A small model given the
README's `{"properties": {"name": …, "age": …}}` then invents keys (`"family_family_name"`, nested
lists of skills) until `max_new_tokens` cuts the answer inside a string: 9 of 16 seeds did at the
CLI's defaults (docs/constrained.md). llama.cpp's json-schema-to-grammar, xgrammar's strict mode
(vLLM, SGLang) and OpenAI's strict structured outputs all treat a missing `additionalProperties`
as false; so does the daemon. Every answer still validates against the schema as written (a closed
object is one of the objects it allows); a schema that wants extra keys says
`"additionalProperties": true` (or gives `patternProperties` / `unevaluatedProperties`).

Only ever narrowing, so every answer stays valid against the schema as written:
- objects whose keys may come from elsewhere are not closed themselves (their insides are): a
  member of `allOf`, `then`/`else`, a `dependentSchemas` entry, an object beside `allOf`/`anyOf`/
  `oneOf`/`$ref`/`if`/`dependentSchemas`, and the `anyOf` branches of an object with `properties`;
- what sits under a negation or a count is left exactly as written: `not`, the `if` condition,
  `contains` (with `maxContains`, fewer matching items can pass), and `oneOf`
  (exactly one branch must match, so narrowing one branch can turn an answer the schema refuses,
  because two branches matched, into one that passes); and `$defs`/`definitions` when the schema
  uses any of those (a definition may be referenced from under them).
"""

from __future__ import annotations

from typing import Any

# Subschemas that describe another value (an item, a property's value): closed like the root.
_OTHER = frozenset(
    {
        "items",
        "prefixItems",
        "additionalItems",
        "additionalProperties",
        "unevaluatedItems",
        "unevaluatedProperties",
        "propertyNames",
        "properties",
        "patternProperties",
    }
)
_DEFS = frozenset({"$defs", "definitions"})
# Subschemas about the same value as their parent: not closed themselves (the parent's keys), insides are.
_SAME = frozenset({"then", "else", "dependentSchemas", "allOf"})
# Keywords whose value is a map of name -> subschema (the others hold one subschema or a list).
_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas"}) | _DEFS
# Negated or exactly-one: left as written (narrowing there can widen what the schema accepts).
_NEGATING = frozenset({"not", "if", "oneOf"})
# An object that names any of these already decides about other keys: leave it.
_OPEN = frozenset({"additionalProperties", "patternProperties", "unevaluatedProperties"})
# An object beside any of these may get keys from them: closing it would forbid those keys.
_COMPOSED = frozenset({"allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas"})


def close_objects(schema: Any) -> Any:
    """A copy of `schema` with `"additionalProperties": false` on every object that is silent about it."""
    return _close(schema, same=False, defs=not _negates(schema))


def _negates(value: Any) -> bool:
    """Whether a negating keyword (not, if, oneOf) appears anywhere in the schema."""
    if isinstance(value, dict):
        return any(key in _NEGATING for key in value) or any(_negates(v) for v in value.values())
    if isinstance(value, list):
        return any(_negates(v) for v in value)
    return False


def _mode(key: str, schema: dict[str, Any], defs: bool) -> bool | None:
    """How to walk a keyword's subschemas: False (another value), True (the same value), None (don't)."""
    if key in _OTHER or (key in _DEFS and defs):
        return False
    if key in _SAME:
        return True
    if key == "anyOf":  # branches share the object's keys when it has its own
        return "properties" in schema
    return None


def _close(schema: Any, same: bool, defs: bool) -> Any:
    if not isinstance(schema, dict):
        return schema  # true / false, or a value that is not a schema (llguidance judges it)
    out = dict(schema)
    if "properties" in schema and not same and not (schema.keys() & (_COMPOSED | _OPEN)):
        out["additionalProperties"] = False
    for key, value in schema.items():
        mode = _mode(key, schema, defs)
        if mode is not None:
            out[key] = _close_value(key, value, mode, defs)
    return out


def _close_value(key: str, value: Any, mode: bool, defs: bool) -> Any:
    """A keyword's value with the schemas it holds closed (a map of them, a list, or one)."""
    if key in _MAPS and isinstance(value, dict):
        return {name: _close(sub, mode, defs) for name, sub in value.items()}
    if isinstance(value, list):
        return [_close(sub, mode, defs) for sub in value]
    if key not in _MAPS:
        return _close(value, mode, defs)
    return value
