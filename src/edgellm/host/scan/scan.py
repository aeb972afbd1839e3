"""Scan an exported ``llm.mnn`` graph against a backend's operator support table."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgellm.common.op_table import op_table
from edgellm.host.quantize.mnn_weights import graph_json
from edgellm.host.scan.support import support_for


class UnsupportedOperators(ValueError):
    """The graph has ops the backend cannot run and CPU fallback was not allowed."""


@dataclass(frozen=True)
class OpCount:
    """One operator type in the graph."""

    op: str
    count: int
    supported: bool


@dataclass(frozen=True)
class ScanReport:
    """Every operator with its count, and what would fall back to the CPU."""

    artifact: str
    backend: str
    ops: list[OpCount]
    fallback: list[str]  # unsupported op types (they run on the CPU when fallback is allowed)
    fallback_nodes: int
    table_source: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)

    def table(self) -> str:
        """Terminal table."""
        rows = [(o.op, o.count, o.supported) for o in self.ops]
        return op_table(self.backend, rows, self.fallback, self.fallback_nodes, self.table_source)


def op_counts(graph: dict[str, Any]) -> Counter[str]:
    """Operator type -> number of nodes, including subgraphs."""
    counts: Counter[str] = Counter(op["type"] for op in graph.get("oplists", []))
    for sub in graph.get("subgraphs") or []:
        counts.update(op["type"] for op in sub.get("nodes", []))
    return counts


def scan(artifact: Path, backend: str, allow_fallback: bool = True) -> ScanReport:
    """Scan ``artifact`` (a directory with llm.mnn, or the .mnn file) for ``backend``."""
    support = support_for(backend)
    directory, name = (artifact.parent, artifact.name) if artifact.is_file() else (artifact, "llm.mnn")
    counts = op_counts(graph_json(directory, name))
    ops = [
        OpCount(op, n, support.supports(op))
        for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    bad = sorted(o.op for o in ops if not o.supported)
    report = ScanReport(
        artifact=str(artifact),
        backend=backend,
        ops=ops,
        fallback=bad,
        fallback_nodes=sum(o.count for o in ops if not o.supported),
        table_source=support.source,
    )
    if bad and not allow_fallback:
        raise UnsupportedOperators(
            f"{backend} cannot run {', '.join(bad)} ({report.fallback_nodes} nodes); "
            "pass --allow-fallback to run them on the CPU"
        )
    return report
