"""Score several models on the same windows of the same tokens, against an fp reference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgellm.common.errors import InvalidArgument
from edgellm.common.hashing import sha256_file
from edgellm.common.paths import data_dir
from edgellm.host.evaluate.metrics import Accumulator, log_softmax
from edgellm.host.evaluate.scorers import Scorer
from edgellm.host.evaluate.windows import windows

EVAL_FILE = "wikitext2-test.txt"
ROWS = 64  # scored positions turned into float64 log-probabilities at a time


def is_evaluation_text(path: Path) -> bool:
    """Whether ``path`` is the evaluation split: by name, by location, or as a copy of its bytes."""
    if path.name == EVAL_FILE:
        return True
    eval_path = data_dir() / EVAL_FILE
    if not (path.is_file() and eval_path.is_file()):
        return False
    if path.resolve() == eval_path.resolve():
        return True
    return path.stat().st_size == eval_path.stat().st_size and sha256_file(path) == sha256_file(eval_path)


@dataclass(frozen=True)
class EvalConfig:
    """What is measured: the first ``tokens`` tokens of ``text_file``, in fixed windows."""

    text_file: Path | None = None  # default: wikitext2-test in the data directory
    tokens: int = 2048
    context: int = 512
    stride: int = 256

    def text(self) -> str:
        """The evaluation text: never past the held-out slice's first article (``corpus``)."""
        from edgellm.host.evaluate.corpus import HELDOUT_FROM, articles

        path = self.text_file or data_dir() / EVAL_FILE
        if not path.is_file():
            raise FileNotFoundError(f"evaluation text {path} missing (set EDGELLM_DATA_DIR)")
        text = path.read_text(encoding="utf-8")
        arts = articles(text)
        if len(arts) > HELDOUT_FROM:  # WikiText-2 test: quick checks read the dev slice only
            text = "\n".join(arts[:HELDOUT_FROM])
        return text[: self.tokens * 16]


def take_tokens(ids: list[int], n: int) -> list[int]:
    """The first ``n`` ids, refusing a text that is too short."""
    if len(ids) < n:
        raise InvalidArgument(f"text yields only {len(ids)} tokens, need {n}")
    return ids[:n]


def evaluate(
    ids: list[int],
    scorers: dict[str, Scorer],
    config: EvalConfig,
    reference: str | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Perplexity per scorer; top-1 and KL against ``reference`` (one of the scorers) when given."""
    accs = {name: Accumulator() for name in scorers}
    wins = windows(len(ids), config.context, config.stride)
    for k, win in enumerate(wins):
        chunk = ids[win.begin : win.end]
        targets = np.asarray(chunk[-win.n_scored :])
        rows = slice(len(chunk) - 1 - win.n_scored, len(chunk) - 1)  # positions predicting targets
        # Only the scored rows: a window's whole [T, V] is never held (0.26 GB a scorer at T = 512 and
        # Llama-3's vocabulary; the MNN scorer copies them out of its output buffer).
        logits = {name: score(chunk, rows) for name, score in scorers.items()}
        # Why by rows: a window's float64 log-probabilities, [n_scored, V] per scorer, and the KL's
        # temporaries of that size were 1.6 GB at 256 rows and Llama-3's 128,256-token vocabulary,
        # the peak of a streamed `edgellm quantize` (docs/quantization.md). Same sums, in parts.
        for a in range(0, len(targets), ROWS):
            part = slice(a, a + ROWS)
            logps = {name: log_softmax(x[part]) for name, x in logits.items()}
            ref = logps.get(reference) if reference else None
            for name, acc in accs.items():
                acc.add(logps[name], targets[part], ref)
        if progress:
            progress((k + 1) / len(wins), f"window {k + 1}/{len(wins)}")
    return {name: acc.result() for name, acc in accs.items()}


def artifact_bytes(artifact: Path) -> int:
    """Size of everything the phone loads (every regular file, hidden staging excluded)."""
    return sum(p.stat().st_size for p in artifact.iterdir() if p.is_file() and not p.name.startswith("."))
