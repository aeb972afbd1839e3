"""Per-backend operator support tables, shipped as data with the MNN source they were read from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

TABLE = "mnn-3.6.1.json"


@dataclass(frozen=True)
class BackendSupport:
    """Ops one backend runs natively (after MNN's geometry rewrite where the backend uses it)."""

    backend: str
    native: frozenset[str]
    geometry: frozenset[str]  # ops rewritten into primitives before reaching the backend
    graph_only: frozenset[str]  # inputs/constants: not executed
    source: str
    how: str

    def supports(self, op: str) -> bool:
        """Whether ``op`` runs on this backend without falling back to the CPU."""
        if op in self.graph_only or op in self.native:
            return True
        # A rewritten op runs as Raster/primitive ops; those must exist on the backend.
        return op in self.geometry and "Raster" in self.native


@cache
def _table() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        resources.files("edgellm.host.scan").joinpath("tables", TABLE).read_text(encoding="utf-8")
    )
    return doc


def backends() -> tuple[str, ...]:
    """Backends with a table."""
    return tuple(_table()["backends"])


def support_for(backend: str) -> BackendSupport:
    """The support table for ``backend`` (ValueError naming the valid ones)."""
    doc = _table()
    if backend not in doc["backends"]:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(doc['backends'])}")
    entry = doc["backends"][backend]
    return BackendSupport(
        backend=backend,
        native=frozenset(entry["ops"]),
        geometry=frozenset(doc["geometry"]["ops"]) if entry["uses_geometry"] else frozenset(),
        graph_only=frozenset(doc["graph_only_ops"]),
        source=f"{doc['source']}; {entry['source']}",
        how=entry["how"],
    )
