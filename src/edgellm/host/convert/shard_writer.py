"""Write a checkpoint's tensors as safetensors shards while they are produced, one shard in memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

# Why 1 GiB: the default model's fp32 checkpoint (538 MB) stays the single model.safetensors it
# always was, and a 7B fp16 conversion holds at most ~1 GiB of finished tensors at a time.
DEFAULT_SHARD_BYTES = 1 << 30
_SINGLE = "model.safetensors"
_INDEX = "model.safetensors.index.json"


class ShardWriter:
    """Collects tensors and flushes a shard whenever the next tensor would pass ``max_bytes``.

    ``finish`` names the shards as ``save_pretrained`` does: one ``model.safetensors``, or
    ``model-0000i-of-0000n.safetensors`` with a ``model.safetensors.index.json``.
    """

    def __init__(self, out_dir: Path, max_bytes: int = DEFAULT_SHARD_BYTES) -> None:
        self.out_dir = out_dir
        self.max_bytes = max_bytes
        self._pending: dict[str, Any] = {}
        self._pending_bytes = 0
        self._shards: list[list[str]] = []  # tensor names per flushed shard
        self._total = 0

    def add(self, name: str, tensor: Any) -> None:
        """Queue one tensor (a torch tensor) for the current shard."""
        size = tensor.numel() * tensor.element_size()
        if self._pending and self._pending_bytes + size > self.max_bytes:
            self._flush()
        self._pending[name] = tensor.contiguous()
        self._pending_bytes += size
        self._total += size

    def _flush(self) -> None:
        from safetensors.torch import save_file

        path = self.out_dir / f"shard-{len(self._shards)}.partial"
        save_file(self._pending, str(path), metadata={"format": "pt"})
        log.debug("shard_written", path=str(path), tensors=len(self._pending), bytes=self._pending_bytes)
        self._shards.append(list(self._pending))
        self._pending, self._pending_bytes = {}, 0

    def finish(self) -> list[Path]:
        """Flush the last shard, give the shards their final names (and an index); return them."""
        if self._pending or not self._shards:
            self._flush()
        n = len(self._shards)
        if n == 1:
            final = self.out_dir / _SINGLE
            (self.out_dir / "shard-0.partial").replace(final)
            return [final]
        weight_map: dict[str, str] = {}
        paths = []
        for i, names in enumerate(self._shards):
            final = self.out_dir / f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            (self.out_dir / f"shard-{i}.partial").replace(final)
            weight_map.update(dict.fromkeys(names, final.name))
            paths.append(final)
        index = {"metadata": {"total_size": self._total}, "weight_map": dict(sorted(weight_map.items()))}
        (self.out_dir / _INDEX).write_text(json.dumps(index, indent=2) + "\n")
        return paths
