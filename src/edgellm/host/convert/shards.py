"""A safetensors checkpoint read tensor by tensor, and its model as a skeleton that holds no weights.

The converter never needs the whole model in memory at once: ``skeleton`` builds the module tree
with every parameter on the meta device (buffers such as RoPE tables are computed on the CPU, as a
normal load computes them) and ``read`` fills in the tensors asked for, from the shards that hold
them (``safe_open``: one tensor at a time, the file mapped only while it is read).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgellm.host.quantize.families import torch_attention

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def tensor_files(hf_dir: Path) -> dict[str, Path]:
    """Checkpoint tensor name -> the shard that holds it (an empty dict for a non-safetensors checkpoint)."""
    from safetensors import safe_open

    index = hf_dir / INDEX
    if index.is_file():
        weight_map: dict[str, str] = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return {name: hf_dir / file for name, file in weight_map.items()}
    single = hf_dir / SINGLE
    if not single.is_file():
        return {}
    with safe_open(str(single), framework="pt") as f:
        return dict.fromkeys(f.keys(), single)


def read(files: Mapping[str, Path], names: Iterable[str]) -> dict[str, torch.Tensor]:
    """The tensors ``names`` in their stored dtype, each shard opened once and closed after."""
    from safetensors import safe_open

    by_file: dict[Path, list[str]] = {}
    for name in names:
        if name not in files:
            raise KeyError(f"tensor {name} is not in the checkpoint")
        by_file.setdefault(files[name], []).append(name)
    out: dict[str, torch.Tensor] = {}
    for path, wanted in by_file.items():
        with safe_open(str(path), framework="pt") as f:
            for name in wanted:
                out[name] = f.get_tensor(name)
    return out


def skeleton(hf_dir: Path, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The checkpoint's causal LM with its parameters on the meta device (buffers real), in eval mode."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(hf_dir))
    # include_buffers=False: non-persistent buffers (rotary inv_freq, Gemma's embed_scale) are not in
    # the checkpoint; they are computed here exactly as from_pretrained computes them.
    with init_empty_weights(include_buffers=False):
        model: nn.Module = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            config, dtype=dtype, **torch_attention(config)
        )
    model.eval()
    for module in model.modules():
        for name, buf in module._buffers.items():
            if buf is not None and getattr(buf, "_is_buffer", False):
                # Why: built through nn.Buffer, the tensor carries `_is_buffer`; llmexport's Embedding
                # then assigns it over a float attribute and torch refuses ("attribute 'embed_scale'
                # already exists": Gemma-2). from_pretrained re-creates these as plain tensors.
                module._buffers[name] = buf.detach()
    return model


def set_parameter(model: nn.Module, name: str, value: torch.Tensor) -> None:
    """Replace parameter ``name`` (``model.layers.0.mlp.up_proj.weight``) by ``value`` (no grad)."""
    owner, _, leaf = name.rpartition(".")
    module = model.get_submodule(owner)
    module._parameters[leaf] = nn.Parameter(value, requires_grad=False)


def untied_parameters(module: nn.Module) -> dict[str, nn.Parameter]:
    """Named parameters of ``module``, a tied one under its first name only (as checkpoints store it)."""
    return dict(module.named_parameters(remove_duplicate=True))


def tie_embeddings(model: Any) -> None:
    """Point the output embedding at the input embedding again when the config ties them."""
    if getattr(model.config, "tie_word_embeddings", False):
        model.get_output_embeddings().weight = model.get_input_embeddings().weight


def placeholder(shape: torch.Size) -> torch.Tensor:
    """A zero tensor of ``shape`` that occupies one element (stride 0): a weight nobody reads."""
    return torch.zeros((), dtype=torch.float32).expand(shape)


def is_placeholder(t: torch.Tensor) -> bool:
    """Whether ``t`` is a ``placeholder`` (every stride 0)."""
    return t.dim() > 0 and all(s == 0 for s in t.stride())


def load_without_linears(hf_dir: Path) -> nn.Module:
    """The checkpoint's model in its stored dtype, with every decoder-layer linear weight a placeholder.

    The tied embedding (= lm_head) is a placeholder too: what reads it is only lm_head's quantized
    rows, which are carried like the layers'. Biases, norms and an untied embedding are real.
    """
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(hf_dir))
    files = tensor_files(hf_dir)
    dtype = getattr(config, "dtype", None) or torch.float32  # what from_pretrained(dtype="auto") takes
    model: Any = skeleton(hf_dir, getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    tie_embeddings(model)
    params = untied_parameters(model)
    fake = _carried_weights(model, params, tied=bool(getattr(config, "tie_word_embeddings", False)))
    with torch.no_grad():
        for name in fake:
            set_parameter(model, name, placeholder(params[name].shape))
        for name, tensor in read(files, [n for n in params if n not in fake]).items():
            set_parameter(model, name, tensor.to(params[name].dtype))
    tie_embeddings(model)
    loaded: nn.Module = model
    return loaded


def _carried_weights(model: Any, params: Mapping[str, nn.Parameter], *, tied: bool) -> set[str]:
    """Names of the decoder linears' weights, and of the embedding when lm_head shares it."""
    layers = model.model.layers.named_modules(prefix="model.layers")
    names = {f"{n}.weight" for n, m in layers if isinstance(m, nn.Linear)}
    if tied:
        names.add(next(n for n, p in params.items() if p is model.get_input_embeddings().weight))
    return names & set(params)


_SAFETENSORS_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F64": torch.float64,
}


def write_patched(src: Path, dst: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy the safetensors file ``src`` to ``dst`` with the bytes of ``tensors`` replaced.

    Each replacement keeps its tensor's stored dtype and shape (it is cast to the dtype; a shape
    that differs is refused), so the header and every other tensor's bytes stay as they were. The
    copy is the kernel's (no file passes through this process); only the patched bytes are written.
    """
    import shutil

    with src.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header: dict[str, Any] = json.loads(f.read(size))
    base = 8 + size
    unknown = sorted(set(tensors) - set(header) - {"__metadata__"})
    if unknown:
        raise KeyError(f"{src.name} holds no tensor {unknown[0]}")
    shutil.copyfile(src, dst)
    with dst.open("r+b") as f:
        for name, value in tensors.items():
            entry = header[name]
            dtype = _SAFETENSORS_DTYPES.get(entry["dtype"])
            if dtype is None:
                raise ValueError(f"{name}: cannot write a {entry['dtype']} tensor")
            if list(value.shape) != list(entry["shape"]):
                raise ValueError(f"{name}: shape {list(value.shape)} is not the stored {entry['shape']}")
            data = value.detach().to("cpu", dtype).contiguous().view(torch.uint8).numpy().tobytes()
            start, end = entry["data_offsets"]
            if len(data) != end - start:
                raise ValueError(f"{name}: {len(data)} bytes for a {end - start}-byte slot")
            f.seek(base + start)
            f.write(data)
