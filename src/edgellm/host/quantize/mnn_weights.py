"""Read and write integer weights inside an exported ``llm.mnn.weight`` file.

llmexport lays each linear out at ``external = [offset, weight_len, alpha_len, bias_len, _]``
(see its ``mnn_converter.build_weight``): a header (rank byte, int16 shape, int8 code map),
the packed codes (two 4-bit codes per byte, high nibble first; or one byte each at 8 bits),
then float32 ``[zero, scale]`` pairs per (output channel, block). We overwrite codes and pairs
with the ones our algorithms produced, so MNN computes with exactly the torch quantized weights.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgellm.host.quantize.grid import QuantizedWeight


@dataclass(frozen=True)
class MnnLinear:
    """Where one quantized linear lives in the weight file."""

    name: str
    offset: int
    weight_len: int
    alpha_len: int
    ic: int
    oc: int
    bits: int
    asymmetric: bool

    @property
    def code_bytes(self) -> int:
        """Packed code length."""
        return (self.oc * self.ic * self.bits + 7) // 8

    @property
    def header_len(self) -> int:
        """Bytes before the codes."""
        return self.weight_len - self.code_bytes

    @property
    def n_blocks(self) -> int:
        """Blocks per output channel, from the alpha length."""
        return self.alpha_len // 4 // self.oc // (2 if self.asymmetric else 1)


# Why not the `mnnconvert` script: it imports MNN.tools.utils.log, which runs
# `pip install -U aliyun-log-python-sdk` when that is missing (downgrading protobuf to 5.29, after
# which every edgellm import fails) and uploads usage logs; a None module entry turns it off, as
# in edgellm.host.convert._llmexport_runner.
_MNNCONVERT = (
    "import sys; sys.modules['MNN.tools.utils.log'] = None; "
    "from MNN.tools.mnnconvert import main; sys.argv[0] = 'mnnconvert'; sys.exit(main())"
)


def graph_json(artifact: Path, model_file: str = "llm.mnn") -> dict[str, Any]:
    """The graph as JSON: llmexport's ``llm.mnn.json`` if kept, else dumped with ``mnnconvert``."""
    path = artifact / f"{model_file}.json"
    if path.is_file():
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return doc
    model = artifact / model_file
    if not model.is_file():
        raise FileNotFoundError(f"{model} missing")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "graph.json"
        cmd = [
            sys.executable,
            "-c",
            _MNNCONVERT,
            "-f",
            "MNN",
            "--modelFile",
            str(model),
            "--JsonFile",
            str(out),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
        if proc.returncode != 0 or not out.is_file():
            raise RuntimeError(f"mnnconvert could not dump {model}: {proc.stdout[-500:]}{proc.stderr[-500:]}")
        doc = json.loads(out.read_text(encoding="utf-8"))
    return doc


def linears(graph: dict[str, Any]) -> dict[str, MnnLinear]:
    """Quantized linears (Convolution ops with external int weights) by op name."""
    out = {}
    for op in graph["oplists"]:
        if op["type"] != "Convolution":
            continue
        main = op["main"]
        quan = main.get("quanParameter") or {}
        ext = main.get("external")
        if not ext or quan.get("type") != 1:
            continue
        out[op["name"]] = MnnLinear(
            name=op["name"],
            offset=int(ext[0]),
            weight_len=int(ext[1]),
            alpha_len=int(ext[2]),
            ic=int(main["common"]["inputCount"]),
            oc=int(main["common"]["outputCount"]),
            bits=int(quan["aMaxOrBits"]),
            asymmetric=int(quan.get("aMin", 0)) != 0,
        )
    return out


def _pack(q: QuantizedWeight) -> bytes:
    codes = q.codes.numpy().astype(np.uint8).reshape(-1)  # row-major [oc, ic]
    if q.bits == 8:
        return codes.tobytes()
    if q.bits == 4:
        return ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8).tobytes()
    raise ValueError(f"cannot pack {q.bits}-bit codes")


def _alpha(q: QuantizedWeight) -> bytes:
    pairs = torch.stack([q.zero, q.scale], dim=-1)  # [oc, nb, 2]
    return pairs.to(torch.float32).numpy().tobytes()


def write(weight_file: Path, slot: MnnLinear, q: QuantizedWeight) -> None:
    """Overwrite one linear's codes and ``[zero, scale]`` pairs in place."""
    oc, ic = q.codes.shape
    nb = ic // q.block
    if (slot.oc, slot.ic, slot.bits) != (oc, ic, q.bits) or not slot.asymmetric or slot.n_blocks != nb:
        raise ValueError(
            f"{slot.name}: exported slot (oc={slot.oc}, ic={slot.ic}, bits={slot.bits}, "
            f"blocks={slot.n_blocks}) "
            f"does not match the quantized weight (oc={oc}, ic={ic}, bits={q.bits}, blocks={nb})"
        )
    codes, alpha = _pack(q), _alpha(q)
    assert len(codes) == slot.code_bytes and len(alpha) == slot.alpha_len
    with weight_file.open("r+b") as fh:
        fh.seek(slot.offset + slot.header_len)
        fh.write(codes)
        fh.write(alpha)


def read(weight_file: Path, slot: MnnLinear) -> QuantizedWeight:
    """Decode one linear back from the weight file (the round-trip check reads this)."""
    return read_rows(weight_file, slot, slice(0, slot.oc))


def read_rows(weight_file: Path, slot: MnnLinear, part: slice) -> QuantizedWeight:
    """Decode output rows ``part`` (a step-1 slice) of one linear: only their bytes are read.

    Rows are laid out one after another (codes, then each row's ``[zero, scale]`` pairs), so a
    row range is one contiguous read of codes and one of pairs.
    """
    start, stop, step = part.indices(slot.oc)
    if step != 1 or stop < start:
        raise ValueError(f"{slot.name}: rows {part} are not a forward range")
    n = stop - start
    row_bytes = slot.ic * slot.bits // 8  # ic is a multiple of the block, so of 2 at 4 bits
    row_alpha = slot.alpha_len // slot.oc
    with weight_file.open("rb") as fh:
        fh.seek(slot.offset + slot.header_len + start * row_bytes)
        raw = np.frombuffer(fh.read(n * row_bytes), dtype=np.uint8)
        fh.seek(slot.offset + slot.header_len + slot.code_bytes + start * row_alpha)
        alpha = np.frombuffer(fh.read(n * row_alpha), dtype=np.float32)
    if slot.bits == 4:
        codes = np.stack([raw >> 4, raw & 0xF], axis=-1).reshape(n, slot.ic)
    else:
        codes = raw.reshape(n, slot.ic)
    pairs = torch.from_numpy(alpha.copy()).reshape(n, slot.n_blocks, 2)
    return QuantizedWeight(
        codes=torch.from_numpy(codes.copy()),
        scale=pairs[..., 1].contiguous(),
        zero=pairs[..., 0].contiguous(),
        bits=slot.bits,
        block=slot.ic // slot.n_blocks,
    )
