"""Real model shapes for the scale benches, their random-weight checkpoints, and a tree RSS sampler.

Each shape is the architecture part of the model's own config.json (vocabulary included: the
embeddings are a large share of a small model). The checkpoints use the bundled SmolLM2
tokenizer (49,152 tokens, no download), so the vocabulary is padded beyond it, as Qwen2.5's is
(151,936 rows for 151,665 tokens); a shape with fewer rows (Phi-3.5-mini: 32,064) gets the
tokenizer cut to its first ids (`fit_tokenizer`), so no token id can pass the embedding.
Checkpoints are written tensor by tensor (meta-device model for the names and shapes), so
building one never holds more than its largest tensor in memory.

    build_checkpoint("qwen2.5-0.5b", Path(".cache/scale/qwen2.5-0.5b/hf"))
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # no stubs in the venv

GIB = 1024**3
SHARD_BYTES = 2 * GIB  # HF's own default shard is 5 GB; smaller shards exercise the sharded path
INIT_STD = 0.02  # transformers' initializer_range for these families

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


@dataclass(frozen=True)
class Shape:
    """One model's architecture: its transformers classes and config.json fields."""

    name: str  # the model it copies, e.g. "Qwen2.5-0.5B"
    family: str  # same family = same per-layer cost, for the 8B extrapolation
    config_class: str
    model_class: str
    fields: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # where the shape departs from the real config, and why that does not matter

    @property
    def layers(self) -> int:
        """Transformer blocks."""
        return int(self.fields["num_hidden_layers"])


def _shape(name: str, family: str, classes: str, note: str = "", **fields: Any) -> Shape:
    return Shape(name, family, f"{classes}Config", f"{classes}ForCausalLM", fields, note)


SHAPES: dict[str, Shape] = {
    "qwen2.5-0.5b": _shape(
        "Qwen2.5-0.5B", "qwen2.5", "Qwen2",
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    ),
    "qwen2.5-1.5b": _shape(
        "Qwen2.5-1.5B", "qwen2.5", "Qwen2",
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    ),
    "llama-3.2-1b": _shape(
        "Llama-3.2-1B", "llama3", "Llama",
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
        tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE,
    ),
    "llama-3.2-3b": _shape(
        "Llama-3.2-3B", "llama3", "Llama",
        hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
        num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=131072,
        tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE,
    ),
    "qwen3-1.7b": _shape(
        "Qwen3-1.7B", "qwen3", "Qwen3",
        hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    ),
    "gemma-2-2b": _shape(
        "Gemma-2-2B", "gemma2", "Gemma2",
        hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
        query_pre_attn_scalar=256, sliding_window=4096, final_logit_softcapping=30.0,
        attn_logit_softcapping=50.0, tie_word_embeddings=True,
    ),
    "phi-3.5-mini": _shape(
        "Phi-3.5-mini", "phi3", "Phi3",
        note="longrope scaling left out (it changes RoPE factors, not any weight), context 4,096",
        hidden_size=3072, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096,
        tie_word_embeddings=False,
    ),
    "llama-3.1-8b": _shape(
        "Llama-3.1-8B", "llama3", "Llama",
        note="16 GB in bf16: extrapolated per layer from the llama3 shapes unless built",
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
        tie_word_embeddings=False, rope_parameters={**LLAMA3_ROPE, "factor": 8.0},
    ),
}  # fmt: skip


def tokenizer_dir() -> Path:
    """The bundled default model's checkpoint directory (its tokenizer serves every shape)."""
    from edgellm.host.builder.source import checkpoint, resolve_source

    return checkpoint(resolve_source("default"))


def make_config(shape: Shape) -> Any:
    """The shape's transformers config, with SmolLM2's special token ids."""
    import transformers

    ids = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    # `architectures` is what save_pretrained of a model writes; llama.cpp's converter needs it.
    fields = {**ids, **shape.fields, "dtype": "bfloat16", "architectures": [shape.model_class]}
    return getattr(transformers, shape.config_class)(**fields)


def tensor_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Every saved tensor's name and shape, from a model built on the meta device (no memory)."""
    import torch
    import transformers

    config = make_config(shape)
    with torch.device("meta"):
        model = getattr(transformers, shape.model_class)(config)
    names = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        names.pop("lm_head.weight", None)  # saved once, as the embedding
    return names


def random_tensor(name: str, dims: tuple[int, ...], seed: int, norm: float = 1.0) -> Any:
    """A bf16 tensor as transformers would initialise it: norms NORM, biases 0, weights N(0, 0.02)."""
    import torch

    if name.endswith("norm.weight") or "layernorm" in name:
        return torch.full(dims, norm, dtype=torch.bfloat16)
    if name.endswith(".bias"):
        return torch.zeros(dims, dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(dims, generator=gen) * INIT_STD).to(torch.bfloat16)


def norm_init(shape: Shape) -> float:
    """The stored norm weight transformers initialises: Gemma's RMSNorm scales by (1 + w), so 0."""
    # Why: with 1 a Gemma-2 checkpoint had gain 2 in every norm, 2x larger q and k, and attention
    # logits of std ~3.7 against ~0.9 as built by transformers; its conversion gate then failed on
    # MNN-vs-torch fidelity (KL 0.19, rising with position) where the other families pass.
    return 0.0 if shape.model_class.startswith("Gemma") else 1.0


def _write_shards(names: dict[str, tuple[int, ...]], out: Path, norm: float = 1.0) -> int:
    """Write sharded safetensors plus the index, one tensor in memory at a time; total bytes."""
    from safetensors.torch import save_file

    shards: list[list[str]] = [[]]
    size = total = 0
    for name, dims in names.items():
        nbytes = 2 * _numel(dims)
        if size and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
        total += nbytes
    weight_map: dict[str, str] = {}
    order = list(names)
    for i, group in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {n: random_tensor(n, names[n], order.index(n), norm) for n in group}
        save_file(tensors, str(out / file), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(group, file)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    return total


def _numel(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def build_checkpoint(shape_key: str, out: Path) -> Path:
    """Write a random-weight bf16 checkpoint of SHAPES[shape_key] (sharded safetensors + tokenizer)."""
    import transformers

    shape = SHAPES[shape_key]
    out.mkdir(parents=True, exist_ok=True)
    # Shards hold at most SHARD_BYTES at once (a shard's tensors are saved together).
    _write_shards(tensor_shapes(shape), out, norm_init(shape))
    make_config(shape).save_pretrained(str(out))
    transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir())).save_pretrained(str(out))
    fit_tokenizer(out / "tokenizer.json", int(shape.fields["vocab_size"]))
    return out


def fit_tokenizer(path: Path, vocab_size: int) -> None:
    """Cut a byte-level BPE tokenizer.json to ids below VOCAB_SIZE (no-op when it already fits).

    Why: SmolLM2's 49,152 tokens exceed Phi-3.5's 32,064 embedding rows; its ids past them would
    index outside the embedding (torch raises in the gate, llama.cpp's converter refuses the
    vocabulary). Kept: the tokens below the cut (SmolLM2's specials and all 256 byte tokens are
    ids 0-272) and the merges whose parts and result are all kept, so every text still encodes.
    """
    doc = json.loads(path.read_text())
    vocab: dict[str, int] = doc["model"]["vocab"]
    if len(vocab) <= vocab_size:
        return
    kept = {t: i for t, i in vocab.items() if i < vocab_size}
    doc["model"]["vocab"] = kept
    doc["model"]["merges"] = [m for m in doc["model"]["merges"] if _merge_kept(m, kept)]
    doc["added_tokens"] = [t for t in doc["added_tokens"] if t["id"] < vocab_size]
    path.write_text(json.dumps(doc, ensure_ascii=False))


def _merge_kept(merge: str | list[str], kept: dict[str, int]) -> bool:
    """Whether a merge's two parts and its result are all in KEPT (merges are "a b" or [a, b])."""
    a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
    return a in kept and b in kept and a + b in kept


def fp16_bytes(hf_dir: Path) -> int:
    """The checkpoint's size at 2 bytes per parameter, read from the safetensors headers only."""
    total = 0
    for path in sorted(hf_dir.glob("*.safetensors")):
        with path.open("rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        total += sum(2 * _numel(info["shape"]) for name, info in header.items() if name != "__metadata__")
    return total


STAGES = ("load", "quantize", "export", "verify", "evaluate", "done")
_STAGE = re.compile(r"\b(" + "|".join(STAGES) + r"): ")


class TreeSampler:
    """Polls the RSS of a process and its descendants; keeps the peak, overall and per stage.

    The stage is the last one the CLI's progress bar named (``export: ...``); per stage it keeps
    the tree's peak and each process's (the CLI is ``main``, a child by its script's name).
    """

    def __init__(self, pid: int, interval: float) -> None:
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self.peak_procs = 0
        self.stage = "start"
        self.stages: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def saw(self, text: str) -> None:
        """Move to the last stage named in ``text`` (a chunk of the CLI's output)."""
        found = _STAGE.findall(text)
        if found:
            self.stage = found[-1]

    def _sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        rss, per = 0, dict[str, int]()
        for p in procs:
            try:
                r = p.memory_info().rss
                name = "main" if p.pid == self.root.pid else _proc_name(p)
            except psutil.NoSuchProcess:
                continue
            rss += r
            per[name] = per.get(name, 0) + r
        if rss > self.peak:
            self.peak, self.peak_procs = rss, len(procs)
        stage = self.stages.setdefault(self.stage, {})
        for name, r in (("tree", rss), *per.items()):
            stage[name] = max(stage.get(name, 0), r)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()


def _proc_name(p: Any) -> str:
    """A child's name: its script (``_llmexport_runner.py``) or module (``-m x``), else its exe."""
    cmd = p.cmdline()
    for i, arg in enumerate(cmd[1:], 1):
        if arg == "-m" and i + 1 < len(cmd):
            return str(cmd[i + 1])
        if arg.endswith(".py"):
            return Path(arg).name
    return Path(cmd[0]).name if cmd else "?"


if __name__ == "__main__":
    # `python -m bench.scale_shapes SHAPE OUT`: bench_scale builds in a child, so torch's memory
    # goes with it instead of staying in the bench process for the stages that follow.
    import sys

    build_checkpoint(sys.argv[1], Path(sys.argv[2]))
