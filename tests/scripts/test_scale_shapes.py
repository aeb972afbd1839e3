"""bench/scale_shapes.py copies real models: each shape's parameter count is the published one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scale_report import extrapolate, params_of
from bench.scale_shapes import SHAPES, fit_tokenizer, norm_init, random_tensor, tokenizer_dir

# Total parameters as the models' safetensors report them (tied embeddings counted once).
PUBLISHED = {
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "gemma-2-2b": 2_614_341_888,
    "phi-3.5-mini": 3_821_079_552,
    "llama-3.1-8b": 8_030_261_248,
}


@pytest.mark.parametrize("shape", sorted(PUBLISHED))
def test_each_shape_has_the_published_parameter_count(shape: str) -> None:
    assert params_of(shape) == PUBLISHED[shape]


def test_extrapolation_is_linear_in_parameters_for_sizes_and_for_time_per_token() -> None:
    known = [
        (1e9, {"convert s": 10.0, "E decode t1": 20.0}),
        (3e9, {"convert s": 30.0, "E decode t1": 20 / 3}),
    ]
    row = extrapolate(6e9, known)  # type: ignore[arg-type]
    assert row["convert s"] == pytest.approx(60.0)
    assert row["E decode t1"] == pytest.approx(20 / 6)  # 1/rate is linear: time per token
    assert row["gptq s"] is None  # no measurement, no figure


def test_a_vocabulary_smaller_than_the_tokenizer_gets_the_tokenizer_cut_to_it(tmp_path: Path) -> None:
    import transformers

    rows = int(SHAPES["phi-3.5-mini"].fields["vocab_size"])  # 32,064 < SmolLM2's 49,152 tokens
    transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir())).save_pretrained(str(tmp_path))
    fit_tokenizer(tmp_path / "tokenizer.json", rows)
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = "The tower is 324 metres (1,063 ft) tall, about the same height as an 81-storey building."
    ids = tok(text)["input_ids"]
    assert len(tok) == rows and max(ids) < rows
    assert tok.decode(ids) == text  # every text still encodes, through shorter tokens
    chat = [{"role": "user", "content": "hi"}]
    prompt = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert prompt[0] == 1 and 2 in prompt  # <|im_start|>, <|im_end|> kept


@pytest.mark.parametrize(
    ("shape", "stored"), [("gemma-2-2b", 0.0), ("llama-3.2-3b", 1.0), ("phi-3.5-mini", 1.0)]
)
def test_norms_are_stored_as_transformers_initialises_them(shape: str, stored: float) -> None:
    # Gemma's RMSNorm multiplies by (1 + w): a stored 0 is gain 1, as for the other families' 1.
    import transformers

    norm = random_tensor("model.layers.0.input_layernorm.weight", (8,), 0, norm_init(SHAPES[shape]))
    assert norm.float().tolist() == [stored] * 8
    config = transformers.Gemma2Config(hidden_size=8, num_hidden_layers=1, head_dim=4, vocab_size=16)
    if shape.startswith("gemma"):  # what transformers itself writes
        model = transformers.Gemma2ForCausalLM(config)  # type: ignore[no-untyped-call]
        assert model.model.norm.weight.abs().max() == 0


def test_a_stage_is_booked_when_its_progress_line_arrives_not_at_the_next_newline() -> None:
    """The sampler books memory under the stage the child's progress bar names (``\\r``, no newline).

    The fake child names "export", holds 300 MB for a second, frees it, names "verify" and waits:
    read by fixed sizes, both names arrived together at exit and the 300 MB went under "verify".
    """
    import sys

    from bench.scale_stages import run_sampled

    child = (
        "import sys, time\n"
        "sys.stderr.write('\\rconvert:  60% , export: llmexport'); sys.stderr.flush()\n"
        "time.sleep(0.5); block = bytearray(300 * 2**20); time.sleep(1.0); del block\n"
        "sys.stderr.write('\\rconvert:  90% , verify: MNN against torch'); sys.stderr.flush()\n"
        "time.sleep(1.0)\n"
    )
    stages = run_sampled([sys.executable, "-c", child], interval=0.05)["stages_gib"]
    assert stages["export"]["main"] >= 0.29
    assert stages["verify"]["main"] < stages["export"]["main"] - 0.25
