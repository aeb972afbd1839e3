"""Calibration samples: fixed-seed windows of a text file (WikiText-2 valid by default, never test)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from edgellm.common.paths import data_dir
from edgellm.host.evaluate.evaluate import is_evaluation_text
from edgellm.host.quantize.plan import Calibration


def calibration_path(calib: Calibration) -> Path:
    """Resolve the calibration file (relative names live in the data directory)."""
    path = Path(calib.file)
    path = path if path.is_absolute() else data_dir() / path
    if is_evaluation_text(path):
        raise ValueError(f"refusing to calibrate on {path}: that is the evaluation split")
    if not path.is_file():
        raise FileNotFoundError(f"calibration text {path} missing")
    return path


def calibration_ids(tokenizer: Any, calib: Calibration, seed: int = 0) -> torch.Tensor:
    """``samples`` windows of ``seq_len`` tokens at seeded random offsets: [samples, seq_len]."""
    text = calibration_path(calib).read_text(encoding="utf-8")
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(ids) <= calib.seq_len:
        raise ValueError(f"calibration text has {len(ids)} tokens, fewer than seq_len {calib.seq_len}")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(ids) - calib.seq_len, (calib.samples,), generator=gen)
    return torch.stack([ids[s : s + calib.seq_len] for s in starts.tolist()])
