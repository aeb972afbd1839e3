"""The artifact manifest on its own: round trip, schema refusals, field errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgellm.common.artifact_files import list_files, publish, read_manifest, write_manifest
from edgellm.common.errors import FailedPrecondition, InvalidArgument
from edgellm.common.manifest import SCHEMA_VERSION, ArtifactManifest, ManifestInvalid, ManifestUnsupported
from edgellm.common.runtime import Runtime, kv_cache_mode
from tests.manifests import SHAPE, manifest_doc, manifest_for


def test_a_manifest_round_trips_through_json_exactly() -> None:
    m = manifest_for({"a.bin": b"x" * 10, "sub/b.txt": b"hello"})
    again = ArtifactManifest.from_json(m.to_json())
    assert again == m and again.to_json() == m.to_json()
    assert again.files[1].path == "sub/b.txt" and again.size_bytes == 15


@pytest.mark.parametrize("version", [None, 1, 4, "2"])
def test_a_missing_or_unknown_schema_version_is_refused_naming_the_supported_one(version: object) -> None:
    doc = manifest_doc({"a": b"x"})
    if version is None:
        del doc["schema_version"]
    else:
        doc["schema_version"] = version
    with pytest.raises(ManifestUnsupported) as err:
        ArtifactManifest.from_dict(doc)
    assert isinstance(err.value, FailedPrecondition)
    text = str(err.value)
    assert "schema_version" in text and f"schema_version {SCHEMA_VERSION}" in text and "rebuild" in text


@pytest.mark.parametrize(
    ("where", "value", "named"),
    [
        (("model", "head_dim"), "64", "model.head_dim must be int"),
        (("model", "num_layers"), 0, "num_layers must be positive"),
        (("runtime", "attention_mode"), 11, "attention_mode must be one of"),
        (("quantization", "bits"), 3, "bits must be 4 or 8"),
        (("tokenizer", "stop_token_ids"), [2, "x"], "tokenizer.stop_token_ids[1] must be int"),
        (("source", "format"), "onnx", "format must be 'gguf' or 'hf'"),
    ],
)
def test_a_bad_field_is_refused_with_its_name(where: tuple[str, str], value: object, named: str) -> None:
    doc = manifest_doc({"a": b"x"})
    doc[where[0]][where[1]] = value
    with pytest.raises(ManifestInvalid) as err:
        ArtifactManifest.from_dict(doc)
    assert isinstance(err.value, InvalidArgument) and named in str(err.value)


def test_missing_and_unknown_fields_are_named() -> None:
    doc = manifest_doc({"a": b"x"})
    del doc["model"]["context_length"]
    with pytest.raises(ManifestInvalid, match=r"model\.context_length is missing"):
        ArtifactManifest.from_dict(doc)
    doc = manifest_doc({"a": b"x"})
    doc["extra"] = {}
    with pytest.raises(ManifestInvalid, match=r"unknown field\(s\) \['extra'\]"):
        ArtifactManifest.from_dict(doc)


def test_kv_bytes_follow_the_kv_precision_from_one_function() -> None:
    per_token_fp = SHAPE.kv_bytes(1, kv_cache_mode("fp"))
    assert per_token_fp == 2 * 30 * 3 * 64 * 4  # fp32 keys and values (docs/engine.md: ~46 KB/token)
    assert SHAPE.kv_bytes(1, kv_cache_mode("int8_k")) == 30 * 3 * 64 * (1 + 4)
    assert SHAPE.kv_bytes(1, kv_cache_mode("int8")) == 2 * 30 * 3 * 64  # int8 = int8_kv
    with pytest.raises(ValueError, match="attention_mode"):
        SHAPE.kv_bytes(1, 12)
    assert Runtime.for_kv_cache("int8_k").attention_mode == 9


def test_list_files_hashes_nested_files_but_not_hidden_ones_or_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("hello")
    (tmp_path / "a.bin").write_bytes(b"\0" * 64)
    (tmp_path / ".staging").write_text("x")
    write_manifest(tmp_path, manifest_for({"a.bin": b"\0" * 64}))
    assert [f.path for f in list_files(tmp_path)] == ["a.bin", "sub/b.txt"]
    assert read_manifest(tmp_path)[0].files[0].size == 64


def test_publish_swaps_a_whole_directory_and_refuses_to_replace_without_force(tmp_path: Path) -> None:
    out, new = tmp_path / "out", tmp_path / ".new"
    out.mkdir()
    (out / "old.txt").write_text("old")
    new.mkdir()
    (new / "new.txt").write_text("new")
    with pytest.raises(FileExistsError, match="force"):
        publish(new, out)
    publish(new, out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old one is gone, nothing left over


def test_a_push_manifest_is_the_artifact_manifest_with_wire_limits() -> None:
    from edgellm.common.push_manifest import parse_manifest

    doc = manifest_doc({"a": b"x"})
    pushed = parse_manifest(json.dumps(doc))
    assert pushed.manifest.name == "fake" and pushed.total_bytes == 1
    del doc["schema_version"]
    with pytest.raises(ManifestUnsupported, match="schema_version"):
        parse_manifest(json.dumps(doc))


def test_a_schema_2_manifest_reads_as_schema_3_without_the_newer_keys() -> None:
    """Artifacts built before issue 28 (schema 2) load; the keys schema 3 added read as absent."""
    doc = manifest_doc({"a": b"x"})
    doc["schema_version"] = 2
    for key in ("sampling",):
        doc.pop(key, None)
    m = ArtifactManifest.from_dict(doc)
    assert m.schema_version == 2 and m.sampling is None
