"""Chat templates, stop tokens and token bytes from the model itself (issue 28, item 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edgellm.host.convert.chat_template import CONVERSATIONS, check_conformance, reference_ids, system_role
from edgellm.host.convert.llmexport_adapter import ExportFailed
from edgellm.host.convert.token_table import ROUND_TRIP_TEXT, check_round_trip, stop_token_ids, token_pieces
from tests.tiny_families import CHAT, build_tiny, chat_tokenizer

SYSTEM_ROLE = {
    "llama": "supported",
    "llama3": "supported",
    "mistral": "fold",  # into the last user turn, "[INST] system\n\nuser[/INST]"
    "qwen2": "supported",
    "qwen3": "supported",
    "gemma2": "refuse",  # raise_exception('System role not supported')
    "gemma3_text": "fold",  # into the first user turn
    "phi3": "supported",
    "smollm3": "supported",
}
TURN_END = {
    "llama3": ("<|eot_id|>", "<|eom_id|>"),
    "mistral": ("</s>",),
    "qwen2": ("<|im_end|>",),
    "qwen3": ("<|im_end|>",),
    "gemma2": ("<end_of_turn>",),
    "gemma3_text": ("<end_of_turn>",),
    "phi3": ("<|end|>", "<|endoftext|>"),
    "smollm3": ("<|im_end|>",),
}


def _sentencepiece_tokenizer() -> object:
    """A Llama-2-style BPE with byte fallback: a few pieces, "▁" for spaces, <0xNN> for the rest."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for piece in ("▁", "a", "b", "▁a", "▁ab"):
        vocab[piece] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[("▁", "a"), ("▁a", "b")], byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def test_byte_fallback_tokens_are_their_byte_not_their_name() -> None:
    tok = _sentencepiece_tokenizer()
    pieces = token_pieces(tok)
    assert pieces[3 + 0x0A] == b"\n"
    assert pieces[3 + 0xF0] == b"\xf0"
    assert pieces[1] == b"<s>"  # special tokens stay literal text
    assert check_round_trip(tok, pieces, ["ab a\nb", ROUND_TRIP_TEXT]) is None


def test_the_round_trip_guard_names_the_text_a_wrong_table_breaks() -> None:
    tok = _sentencepiece_tokenizer()
    pieces = token_pieces(tok)
    pieces[3 + 0x0A] = b"<0x0A>"  # the table as it was written before byte fallback was decoded
    assert check_round_trip(tok, pieces, ["ab", ROUND_TRIP_TEXT]) == ROUND_TRIP_TEXT


@pytest.mark.parametrize("family", sorted(TURN_END))
def test_each_family_stops_at_its_own_turn_end_token(family: str, tmp_path: Path) -> None:
    tok = chat_tokenizer(family)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [tok.eos_token_id]}))
    ids = stop_token_ids(tok, tmp_path)
    for marker in TURN_END[family]:
        assert tok.convert_tokens_to_ids(marker) in ids, marker


def test_every_eos_id_of_a_generation_config_list_stops(tmp_path: Path) -> None:
    tok = chat_tokenizer("llama3")
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 8, 9]}))
    assert {7, 8, 9} <= set(stop_token_ids(tok, tmp_path))


@pytest.mark.parametrize("family", sorted(CHAT))
def test_the_system_role_is_read_from_the_template(family: str) -> None:
    assert system_role(chat_tokenizer(family)) == SYSTEM_ROLE[family]


@pytest.fixture(scope="module")
def gemma2_chat_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama exported with Gemma-2's chat tokenizer (the template, not the architecture, is tested)."""
    return _export("gemma2", tmp_path_factory.mktemp("gemma2-chat"))


def _export(template_family: str, root: Path) -> Path:
    from edgellm.host.builder.loaded import LoadedModel
    from edgellm.host.builder.pipeline import Measure, build_artifact
    from edgellm.host.convert.pipeline import convert_plan
    from edgellm.host.evaluate.evaluate import EvalConfig

    hf = build_tiny("llama", root / "hf", chat=template_family)
    loaded = LoadedModel.open(str(hf), EvalConfig())
    out = root / "artifact"
    build_artifact(loaded, convert_plan(8, 32, 8), out, builder="convert", measure=Measure(evaluate=False))
    return out


def test_a_template_without_a_system_role_is_recorded_and_refused_on_the_device(
    gemma2_chat_artifact: Path,
) -> None:
    from edgellm.common.errors import InvalidArgument
    from edgellm.engine.artifact import open_artifact
    from edgellm.engine.config import EngineConfig
    from edgellm.engine.mnn import MnnEngine

    artifact = open_artifact(gemma2_chat_artifact)
    assert artifact.manifest.tokenizer.system_role == "refuse"
    assert artifact.manifest.tokenizer.stop_token_ids  # <eos>, <end_of_turn>, ...
    engine = MnnEngine(artifact, EngineConfig(threads=1))
    engine.load()
    with pytest.raises(InvalidArgument, match="no system role"):
        engine.apply_chat_template([("system", "Be terse."), ("user", "Hi")])
    tok = chat_tokenizer("gemma2")
    messages = [("user", "Hi 🦊"), ("assistant", "Hello."), ("user", "Capital of France?")]
    assert engine.encode(engine.apply_chat_template(messages)) == reference_ids(tok, messages)


def test_a_template_the_device_renders_differently_fails_the_build_naming_the_token(
    gemma2_chat_artifact: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(gemma2_chat_artifact, broken)
    config = json.loads((broken / "llm_config.json").read_text())
    config["jinja"]["chat_template"] = config["jinja"]["chat_template"].replace("model\n", "assistant\n")
    (broken / "llm_config.json").write_text(json.dumps(config))
    with pytest.raises(ExportFailed, match="first difference at token"):
        check_conformance(broken, chat_tokenizer("gemma2"), "refuse")


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(CHAT))
def test_the_device_prompt_ids_equal_transformers_for_every_family(family: str, tmp_path: Path) -> None:
    """The issue's Prove-it: system + user + assistant + user (and the other canonical turns)."""
    out = _export(family, tmp_path)  # the build itself runs check_conformance over CONVERSATIONS
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["system_role"] == SYSTEM_ROLE[family]
    assert len(CONVERSATIONS) == 4
