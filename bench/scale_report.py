"""bench_scale's summary: one row per shape (markdown + JSON), the 8B row extrapolated, and the `--fit` facts.

A shape that was not measured (the 8B) is fitted per parameter from the measured shapes of its
family (all measured shapes where the family has fewer than two): sizes, times and RSS as
a + b * params, rates as 1 / (a + b * params) (time per token grows with the weights read).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.scale_shapes import GIB, SHAPES

# Row columns: (header, stage, path into its JSON, kind). kind "rate" fits 1/y, "size" fits y.
COLUMNS: list[tuple[str, str, tuple[str, ...], str]] = [
    ("fp16 GiB", "build", ("fp16_bytes",), "size"),
    ("convert s", "convert", ("wall_s",), "size"),
    ("convert peak GiB", "convert", ("tree_peak_rss",), "size"),
    ("artifact GiB", "convert", ("artifact_bytes",), "size"),
    ("gptq s", "gptq", ("wall_s",), "size"),
    ("gptq peak GiB", "gptq", ("tree_peak_rss",), "size"),
    ("gguf f16 s", "gguf", ("convert_f16", "wall_s"), "size"),
    ("gguf f16 peak GiB", "gguf", ("convert_f16", "tree_peak_rss"), "size"),
    ("q4_0 s", "gguf", ("quantize_q4_0", "wall_s"), "size"),
    ("q4_0 GiB", "gguf", ("quantize_q4_0", "gguf_bytes"), "size"),
]
for _t in (1, 2):
    for _engine, _tag in (("edgellm", "E"), ("llama_cpp", "L")):
        COLUMNS += [
            (f"{_tag} decode t{_t}", f"serve_t{_t}", ("engines", _engine, "decode_tps"), "rate"),
            (f"{_tag} prefill t{_t}", f"serve_t{_t}", ("engines", _engine, "prefill_tps"), "rate"),
            (f"{_tag} RSS load t{_t} GiB", f"serve_t{_t}", ("engines", _engine, "rss_after_load"), "size"),
            (f"{_tag} RSS peak t{_t} GiB", f"serve_t{_t}", ("engines", _engine, "peak_rss"), "size"),
        ]
RATIOS = [("decode", "decode_tps"), ("prefill", "prefill_tps"), ("RSS load", "rss_after_load")]
BYTES = ("fp16_bytes", "tree_peak_rss", "artifact_bytes", "gguf_bytes", "rss_after_load", "peak_rss")


def load_results(work: Path, shape: str) -> dict[str, dict[str, Any]]:
    """Every stage JSON of SHAPE that succeeded."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((work / shape / "results").glob("*.json")):
        doc = json.loads(path.read_text())
        if doc.get("rc") == 0:
            found[path.stem] = doc
    return found


def pick(results: dict[str, dict[str, Any]], stage: str, keys: tuple[str, ...]) -> float | None:
    """One figure from a stage's JSON, bytes in GiB; None where missing."""
    node: Any = results.get(stage)
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    value = float(node)
    return value / GIB if keys[-1] in BYTES and keys[0] != "ratio_edgellm_over_llama" else value


def measured_row(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """A shape's figures, one per column, plus the edgellm/llama.cpp ratios per thread count."""
    row = {header: pick(results, stage, keys) for header, stage, keys, _ in COLUMNS}
    for t in (1, 2):
        for label, key in RATIOS:
            row[f"{label} ratio t{t}"] = pick(results, f"serve_t{t}", ("ratio_edgellm_over_llama", key))
    return row


def extrapolate(params: float, known: list[tuple[float, dict[str, float | None]]]) -> dict[str, float | None]:
    """Fit each column over (params, row) pairs and evaluate at PARAMS."""
    row: dict[str, float | None] = {}
    for header, _, _, kind in COLUMNS:
        pts = [(p, r[header]) for p, r in known if r.get(header) is not None]
        row[header] = _fit(params, pts, kind) if len(pts) >= 2 else None
    return row


def _fit(x: float, pts: list[tuple[float, float | None]], kind: str) -> float:
    xs = np.array([p for p, _ in pts])
    ys = np.array([float(v or 0.0) for _, v in pts])
    ys = 1.0 / ys if kind == "rate" else ys
    b, a = np.polyfit(xs, ys, 1)
    y = a + b * x
    if not y > 0:
        # Why: two noisy timings (another job slowed the smaller shape) can give a line whose value
        # at X is negative; then scale the largest measured shape's figure by the parameter count.
        big = int(np.argmax(xs))
        y = ys[big] * x / xs[big]
    return float(1.0 / y if kind == "rate" else y)


def params_of(shape: str) -> float:
    """Parameters of a shape (from a meta-device model: no memory)."""
    from bench.scale_shapes import tensor_shapes

    return float(sum(int(np.prod(d)) for d in tensor_shapes(SHAPES[shape]).values()))


def summary(work: Path, shapes: list[str]) -> dict[str, Any]:
    """Rows for SHAPES; a shape with no serving results is extrapolated from its family's."""
    rows: dict[str, Any] = {}
    measured: dict[str, tuple[float, dict[str, float | None]]] = {}
    for shape in shapes:
        results = load_results(work, shape)
        if any(k.startswith("serve_") for k in results):
            measured[shape] = (params_of(shape), measured_row(results))
            rows[shape] = {"params": measured[shape][0], "label": "measured", **measured[shape][1]}
    for shape in shapes:
        if shape not in measured:
            rows[shape] = _extrapolated_row(shape, measured)
    return rows


def _extrapolated_row(
    shape: str, measured: dict[str, tuple[float, dict[str, float | None]]]
) -> dict[str, Any]:
    family = SHAPES[shape].family
    same = [k for k in measured if SHAPES[k].family == family]
    basis = same if len(same) >= 2 else list(measured)
    params = params_of(shape)
    if len(basis) < 2:
        return {"params": params, "label": "not measured (extrapolation needs two measured shapes)"}
    row = extrapolate(params, [measured[k] for k in basis])
    return {"params": params, "label": f"extrapolated per parameter from {', '.join(basis)}", **row}


# Markdown cells: (header, columns shown as "a / b", the ratio column shown after them as "(x)").
CELLS: list[tuple[str, tuple[str, ...], str | None]] = [
    ("fp16 GiB", ("fp16 GiB",), None),
    ("convert s / peak GiB", ("convert s", "convert peak GiB"), None),
    ("artifact GiB", ("artifact GiB",), None),
    ("GPTQ s / peak GiB", ("gptq s", "gptq peak GiB"), None),
    ("llama.cpp f16 s / peak GiB", ("gguf f16 s", "gguf f16 peak GiB"), None),
    ("Q4_0 s / GiB", ("q4_0 s", "q4_0 GiB"), None),
    *[
        (f"{what} t{t} E / L (E÷L)", (f"E {col} t{t}", f"L {col} t{t}"), f"{col} ratio t{t}")
        for t in (1, 2)
        for what, col in (("decode tok/s", "decode"), ("prefill tok/s", "prefill"))
    ],
    *[
        (
            f"RSS after load t{t} GiB E / L (E÷L)",
            (f"E RSS load t{t} GiB", f"L RSS load t{t} GiB"),
            f"RSS load ratio t{t}",
        )
        for t in (1, 2)
    ],
    ("RSS peak t2 GiB E / L", ("E RSS peak t2 GiB", "L RSS peak t2 GiB"), None),
]


def markdown(rows: dict[str, Any], command: str) -> str:
    """The table, one row per shape (E = edgellm, L = llama.cpp), the command line under it."""
    headers = ["shape", "label", "params (B)", *(h for h, _, _ in CELLS)]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for shape, row in rows.items():
        cells = [shape, row["label"], f"{row['params'] / 1e9:.2f}"]
        cells += [_combined(row, cols, ratio) for _, cols, ratio in CELLS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", f"Command: `{command}`", ""])


def _combined(row: dict[str, Any], cols: tuple[str, ...], ratio: str | None) -> str:
    text = " / ".join(_cell(row.get(c)) for c in cols)
    return text if ratio is None or row.get(ratio) is None else f"{text} ({_cell(row[ratio])})"


def _cell(v: float | None) -> str:
    return "–" if v is None else f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def fit_facts(work: Path, shapes: list[str]) -> dict[str, Any]:
    """Per shape: daemon RSS after load vs artifact size, and KV bytes per token (manifest model facts)."""
    from edgellm.common.manifest import ModelShape

    out: dict[str, Any] = {}
    for shape in shapes:
        manifest_path = work / shape / "rtn" / "manifest.json"
        if not manifest_path.exists():
            continue
        manifest = json.loads(manifest_path.read_text())
        model, mode = ModelShape(**manifest["model"]), int(manifest["runtime"]["attention_mode"])
        results = load_results(work, shape)
        out[shape] = {
            "artifact_bytes": results.get("convert", {}).get("artifact_bytes"),
            "daemon_rss_after_load_gib": {
                f"t{t}": pick(results, f"serve_t{t}", ("engines", "edgellm", "rss_after_load"))
                for t in (1, 2)
            },
            "attention_mode": mode,
            "kv_bytes_per_token": model.kv_bytes(1, mode),
            "kv_bytes_2k": model.kv_bytes(2048, mode),
            "kv_bytes_8k": model.kv_bytes(8192, mode),
        }
    return out
