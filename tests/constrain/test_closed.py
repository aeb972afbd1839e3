"""Objects closed by default (common/closed_schema.py): which objects get `additionalProperties: false`."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from edgellm.common.closed_schema import close_objects

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def test_the_readme_person_schema_is_closed_and_still_accepts_what_it_accepted() -> None:
    closed = close_objects(PERSON)
    assert closed["additionalProperties"] is False
    assert "additionalProperties" not in PERSON  # a copy: the caller's schema is not touched
    jsonschema.validate({"name": "Ada", "age": 36}, closed)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "Ada", "age": 36, "family_name": "Lovelace"}, closed)


def test_nested_objects_in_properties_items_and_defs_are_closed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "home": {"type": "object", "properties": {"city": {"type": "string"}}},
            "pets": {"type": "array", "items": {"properties": {"kind": {"type": "string"}}}},
            "pair": {"prefixItems": [{"properties": {"a": {}}}]},
            "either": {"anyOf": [{"properties": {"b": {}}}, {"type": "null"}]},
        },
        "$defs": {"job": {"properties": {"title": {"type": "string"}}}},
    }
    closed = close_objects(schema)
    props = closed["properties"]
    assert closed["additionalProperties"] is False
    assert props["home"]["additionalProperties"] is False
    assert props["pets"]["items"]["additionalProperties"] is False
    assert props["pair"]["prefixItems"][0]["additionalProperties"] is False
    assert props["either"]["anyOf"][0]["additionalProperties"] is False
    assert closed["$defs"]["job"]["additionalProperties"] is False


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"a": {}}, "additionalProperties": True},
        {"properties": {"a": {}}, "additionalProperties": {"type": "string"}},
        {"properties": {"a": {}}, "patternProperties": {"^x_": {}}},
        {"properties": {"a": {}}, "unevaluatedProperties": True},
        {"type": "object"},  # no properties named: any object (json_object's schema)
    ],
)
def test_an_object_that_decides_about_other_keys_or_names_none_is_left_as_written(
    schema: dict[str, Any],
) -> None:
    closed = close_objects(schema)
    assert closed.get("additionalProperties") == schema.get("additionalProperties")


def test_objects_assembled_from_several_schemas_are_left_open() -> None:
    # Closing any part here would forbid keys another part allows.
    cases = [
        ({"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}, {"a": 1, "b": 2}),
        ({"properties": {"kind": {}}, "anyOf": [{"properties": {"a": {}}}]}, {"kind": 1, "a": 2}),
        (
            {"properties": {"a": {}}, "$ref": "#/$defs/more", "$defs": {"more": {"type": "object"}}},
            {"a": 1, "z": 2},
        ),
    ]
    for schema, answer in cases:
        closed = close_objects(schema)
        assert closed == schema
        jsonschema.validate(answer, closed)


def test_booleans_and_non_objects_pass_through() -> None:
    assert close_objects(True) is True
    assert close_objects({"type": "string"}) == {"type": "string"}
    assert close_objects({"items": [{"properties": {"a": {}}}]})["items"][0]["additionalProperties"] is False


def test_what_sits_under_a_negation_is_left_as_written_so_nothing_invalid_becomes_valid() -> None:
    # {"a": 1} matches both open oneOf branches, so the schema refuses it; closing the branches
    # would make it match only the first, and pass. Same for `not` and an `if` condition.
    one_of: dict[str, Any] = {"oneOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}
    negated = {"not": {"properties": {"a": {"const": 1}}}}
    condition = {"if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}}
    referenced = {"$defs": {"one": {"properties": {"a": {"const": 1}}}}, "not": {"$ref": "#/$defs/one"}}
    for schema, refused in (
        (one_of, {"a": 1}),
        (negated, {"a": 1, "z": 2}),
        (condition, {"a": 1, "z": 2}),
        (referenced, {"a": 1, "z": 2}),
    ):
        closed = close_objects(schema)
        assert closed == schema
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(refused, closed)


def test_then_else_and_dependent_schemas_keep_the_parents_keys() -> None:
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}},
        "if": {"properties": {"kind": {"const": "a"}}},
        "then": {"properties": {"size": {"type": "integer"}}, "required": ["size"]},
        "dependentSchemas": {"kind": {"properties": {"note": {"type": "string"}}}},
    }
    closed = close_objects(schema)
    assert "additionalProperties" not in closed["then"]
    assert "additionalProperties" not in closed["dependentSchemas"]["kind"]
    jsonschema.validate({"kind": "a", "size": 3, "note": "x"}, closed)
