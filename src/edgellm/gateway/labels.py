"""A `device` label on every metric a gateway exports (`--device`), so a fleet's gateways tell apart.

prometheus_client has no registry-wide constant labels; this collector re-emits a registry's
families with the label added. The scrape config that `edgellm fleet config` writes sets
`honor_labels: true`, so the gateway's own label is kept as `device` (not renamed
`exported_device`).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector


class Labelled(Collector):
    """REGISTRY's metrics with LABELS added to every sample (a sample's own label of that name wins)."""

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        self.registry = registry
        self.labels = labels

    def collect(self) -> Iterator[Metric]:
        """Each family of the wrapped registry, its samples relabelled."""
        for family in self.registry.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            for s in family.samples:
                out.add_sample(s.name, {**self.labels, **s.labels}, s.value, s.timestamp, s.exemplar)
            yield out


def exposition(registry: CollectorRegistry, device: str | None) -> CollectorRegistry:
    """What /metrics renders: REGISTRY itself, or a registry that adds `device` to everything."""
    if device is None:
        return registry
    labelled = CollectorRegistry(auto_describe=False)
    labelled.register(Labelled(registry, {"device": device}))
    return labelled
