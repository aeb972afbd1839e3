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

Objects whose meaning is assembled from several schemas are left as written: a member of `allOf`,
an object beside `allOf`/`anyOf`/`oneOf`/`$ref`/`if`/`dependentSchemas` (its keys may come from
there), and the branches of such an object. Closing them would forbid keys another part allows.
"""

from __future__ import annotations

from typing import Any

# Keywords whose value is one subschema, a map of subschemas, or a list of subschemas.
_ONE = (
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LIST = ("anyOf", "oneOf", "prefixItems", "items")
# An object that names any of these already decides about other keys: leave it.
_OPEN = ("additionalProperties", "patternProperties", "unevaluatedProperties")
# An object beside any of these may get keys from them: closing it would forbid those keys.
_COMPOSED = ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas")


def close_objects(schema: Any, composed: bool = False) -> Any:
    """A copy of `schema` with `"additionalProperties": false` on every object that is silent about it."""
    if not isinstance(schema, dict):
        return schema  # true / false, or a value that is not a schema (llguidance judges it)
    node_composed = any(key in schema for key in _COMPOSED)
    out = dict(schema)
    if (
        isinstance(schema.get("properties"), dict)
        and not composed
        and not node_composed
        and not any(key in schema for key in _OPEN)
    ):
        out["additionalProperties"] = False
    for key in _ONE:
        if isinstance(schema.get(key), dict):
            out[key] = close_objects(schema[key])
    for key in _MAP:
        if isinstance(schema.get(key), dict):
            out[key] = {name: close_objects(sub) for name, sub in schema[key].items()}
    for key in _LIST:
        if isinstance(schema.get(key), list):
            # Branches of an object that has its own keys add to them: leave the branches open.
            branch = key in ("anyOf", "oneOf") and "properties" in schema
            out[key] = [close_objects(sub, composed=branch) for sub in schema[key]]
    if isinstance(schema.get("allOf"), list):
        out["allOf"] = [close_objects(sub, composed=True) for sub in schema["allOf"]]
    return out
