"""Export fidelity: how far MNN's next-token distributions sit from a torch reference's.

The reference is the torch model holding exactly the artifact's integers, so quantization error
drops out and what is left is the export (graph, RoPE, masks) and MNN's own arithmetic. Per
position t, with reference log-probs p_t and MNN log-probs q_t:

- ``KL(p_t ‖ q_t)``: its mean, its 99th percentile and its mean per position bucket (0-63,
  64-511, 512+): a wrong RoPE or a lost sliding window leaves the first positions right and
  grows with position;
- top-1 agreement only where the reference is confident (its top-1 beats its top-2 by at least
  ``delta`` nats): on a flat distribution the argmax is a near-tie that any rounding flips, so
  counting those positions measures luck, not the export.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgellm.common.manifest import Fidelity

DELTA = 1.0  # nats: the reference's top-1 is at least e times as likely as its runner-up
MIN_CLEAR = 32  # fewer confident positions than this: top-1 is not judged, KL alone decides
# Bucket edges (first position of each bucket): RoPE and sliding-window defects start past 64.
# Rows per log-softmax. Why 32: each float64 temporary is CHUNK x V x 8 bytes and a KL step holds
# ~5 of them (at 128 rows and Llama-3's 128,256 tokens: 0.65 GB, the gate's largest transient).
# Every figure is computed row by row, so the chunk changes no bit of them.
CHUNK = 32
BUCKETS: tuple[tuple[int, int | None], ...] = ((0, 64), (64, 512), (512, None))


@dataclass(frozen=True)
class Limits:
    """The fidelity gate's thresholds (docs/quantization.md gives the measurements behind them)."""

    max_kl: float = 1e-2  # mean KL, and each position bucket's
    min_top1_clear: float = 0.98
    # The last bucket's KL may be at most max_rise x the first's (when above rise_floor): a faithful
    # export's KL is highest at the first positions, a wrong RoPE or a lost window grows with position.
    max_rise: float = 2.0
    rise_floor: float = 1e-4


def bucket_name(start: int, stop: int | None) -> str:
    """``0-63``, ``64-511``, ``512+``."""
    return f"{start}+" if stop is None else f"{start}-{stop - 1}"


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64: [T, V] -> [T, V]."""
    x = x.astype(np.float64)
    top = x.max(axis=-1, keepdims=True)
    out: np.ndarray = x - (np.log(np.exp(x - top).sum(axis=-1, keepdims=True)) + top)
    return out


def kl_per_position(ref_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL(ref_t ‖ model_t) per position: [T, V], [T, V] -> [T]."""
    out = np.empty(len(ref_logits))
    for a in range(0, len(ref_logits), CHUNK):  # float64 temporaries for CHUNK rows at a time
        p = log_softmax(ref_logits[a : a + CHUNK])
        q = log_softmax(logits[a : a + CHUNK])
        out[a : a + CHUNK] = (np.exp(p) * (p - q)).sum(axis=-1)
    return np.maximum(out, 0.0)  # rounding can give -1e-17


def clear_positions(ref_logits: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """Boolean [T]: where the reference's top-1 logit beats its top-2 by ``delta`` (= log-prob gap)."""
    top2 = np.partition(ref_logits, -2, axis=-1)[:, -2:]  # [T, 2]: runner-up, top-1
    gap: np.ndarray = (top2[:, 1] - top2[:, 0]) >= delta
    return gap


def fidelity(ref_logits: np.ndarray, logits: np.ndarray, delta: float = DELTA) -> Fidelity:
    """The fidelity statistics of ``logits`` [T, V] against ``ref_logits`` [T, V]."""
    if ref_logits.shape != logits.shape:
        raise ValueError(f"logits shapes differ: reference {ref_logits.shape}, model {logits.shape}")
    tally = Tally(len(logits), delta)
    tally.add(0, ref_logits, logits)
    return tally.fidelity()


class Tally:
    """Per-position figures of one model against the reference, filled by chunks of positions.

    What ``fidelity`` computes from two whole [T, V] arrays, with only [C, V] rows of each at a
    time (the gate never holds a vocabulary x positions array whole): every per-position figure is
    computed row by row, so the result is the same to the bit.
    """

    def __init__(self, positions: int, delta: float = DELTA) -> None:
        self.delta = delta
        self.kl = np.full(positions, np.nan)  # [T]
        self.clear = np.zeros(positions, dtype=bool)  # [T]
        self.agree = np.zeros(positions, dtype=bool)  # [T]

    def add(self, start: int, ref_rows: np.ndarray, rows: np.ndarray) -> None:
        """Positions ``start`` .. ``start + len(rows)``: reference and model logits [C, V]."""
        if ref_rows.shape != rows.shape:
            raise ValueError(f"logits shapes differ: reference {ref_rows.shape}, model {rows.shape}")
        self.kl[start : start + len(rows)] = kl_per_position(ref_rows, rows)
        for a in range(0, len(rows), CHUNK):  # np.partition copies its input: CHUNK rows at a time
            at = slice(start + a, start + min(a + CHUNK, len(rows)))
            self.clear[at] = clear_positions(ref_rows[a : a + CHUNK], self.delta)
            self.agree[at] = ref_rows[a : a + CHUNK].argmax(-1) == rows[a : a + CHUNK].argmax(-1)

    def fidelity(self) -> Fidelity:
        """The statistics over every position (each must have been added)."""
        kl = self.kl
        if np.isnan(kl).any():
            raise ValueError(f"{int(np.isnan(kl).sum())} of {len(kl)} positions were never scored")
        by_position = {bucket_name(a, b): float(kl[a:b].mean()) for a, b in BUCKETS if len(kl) > a}
        n_clear = int(self.clear.sum())
        return Fidelity(
            kl_mean=float(kl.mean()),
            kl_p99=float(np.quantile(kl, 0.99)),
            kl_by_position=by_position,
            top1_clear=float(self.agree[self.clear].mean()) if n_clear >= MIN_CLEAR else None,
            n_clear=n_clear,
            delta=self.delta,
        )


def failures(fid: Fidelity, limits: Limits) -> list[str]:
    """What in ``fid`` is beyond ``limits`` (empty: the export is faithful)."""
    out = []
    if not fid.kl_mean <= limits.max_kl:  # also catches NaN
        out.append(f"mean KL(torch‖MNN) {fid.kl_mean:.2e} > {limits.max_kl:.0e}")
    out.extend(_position_failures(fid, limits))
    if fid.top1_clear is not None and fid.top1_clear < limits.min_top1_clear:
        out.append(
            f"top-1 agreement at the {fid.n_clear} positions where torch's top-2 gap is ≥ "
            f"{fid.delta:g} nat {fid.top1_clear:.3f} < {limits.min_top1_clear}"
        )
    return out


def _position_failures(fid: Fidelity, limits: Limits) -> list[str]:
    """A position bucket beyond max_kl (when the mean is not), or KL rising past max_rise."""
    out = []
    kl = fid.kl_by_position
    worst = max(kl, key=lambda k: kl[k], default=None)
    if worst is not None and kl[worst] > limits.max_kl >= fid.kl_mean:
        out.append(f"KL(torch‖MNN) at positions {worst} {kl[worst]:.2e} > {limits.max_kl:.0e}")
    rise = _rise(fid)
    if rise is not None and kl[rise[1]] > limits.rise_floor and rise[2] > limits.max_rise:
        first, last, ratio = rise
        out.append(
            f"KL(torch‖MNN) at positions {last} is {ratio:.1f}x that at {first} (limit {limits.max_rise:g}x)"
        )
    return out


def _rise(fid: Fidelity) -> tuple[str, str, float] | None:
    """(first bucket, last bucket, last KL / first KL), or None with fewer than two buckets."""
    names = list(fid.kl_by_position)
    if len(names) < 2:
        return None
    first, last = names[0], names[-1]
    return first, last, fid.kl_by_position[last] / max(fid.kl_by_position[first], 1e-12)


def describe_positions(fid: Fidelity) -> str:
    """The KL by position bucket, and whether it rises with position (a RoPE/mask symptom)."""
    parts = ", ".join(f"{k} {v:.2e}" for k, v in fid.kl_by_position.items())
    rise = _rise(fid)
    rising = rise is not None and rise[2] > Limits.max_rise
    hint = "; rising with position: position-dependent mismatch (RoPE or sliding window?)" if rising else ""
    kl = fid.kl_by_position
    worst = f"; worst at positions {max(kl, key=lambda k: kl[k])}" if kl else ""
    return f"KL by position bucket {parts}{worst}{hint}"
