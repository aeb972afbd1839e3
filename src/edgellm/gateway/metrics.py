"""Request, token and latency metrics, named as llama-server names them where it has the metric.

llama-server's names (`llamacpp:*`) let its dashboards read edgellm unchanged; what it lacks is
`edgellm_*`. Prompt tokens count what the device actually ran (cached tokens apart), as llama-server
counts processed tokens.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from edgellm.v1 import device_pb2

LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class GatewayMetrics:
    """The gateway's own metrics in one registry (a test can run several gateways)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.prompt_tokens = Counter(
            "llamacpp:prompt_tokens", "Number of prompt tokens processed.", registry=r
        )
        self.prompt_seconds = Counter("llamacpp:prompt_seconds", "Prompt process time", registry=r)
        self.tokens_predicted = Counter(
            "llamacpp:tokens_predicted", "Number of generation tokens processed.", registry=r
        )
        self.predicted_seconds = Counter(
            "llamacpp:tokens_predicted_seconds", "Predict process time", registry=r
        )
        self.prompt_tps = Gauge(
            "llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.", registry=r
        )
        self.predicted_tps = Gauge(
            "llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s.", registry=r
        )
        self.processing = Gauge("llamacpp:requests_processing", "Number of requests processing.", registry=r)
        self.deferred = Gauge("llamacpp:requests_deferred", "Number of requests deferred.", registry=r)
        self.cached_tokens = Counter(
            "edgellm_prompt_tokens_cached",
            "Prompt tokens served from the device's session KV cache.",
            registry=r,
        )
        self.requests = Counter(
            "edgellm_gateway_requests", "HTTP requests answered.", ["endpoint", "status"], registry=r
        )
        self.ttft = Histogram(
            "edgellm_gateway_time_to_first_token_seconds", "Request received to first token, at the gateway.",
            ["endpoint"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.duration = Histogram(
            "edgellm_gateway_request_duration_seconds", "Request received to last byte, at the gateway.",
            ["endpoint"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self._in_flight = 0

    def _occupancy(self) -> None:
        # The device runs one generation at a time: one processing, the rest deferred.
        self.processing.set(min(self._in_flight, 1))
        self.deferred.set(max(self._in_flight - 1, 0))

    def begin(self) -> None:
        """A generation request starts: processing, or deferred behind another one."""
        self._in_flight += 1
        self._occupancy()

    def end(self) -> None:
        """A generation request ended (answered, refused by the device, or abandoned)."""
        self._in_flight -= 1
        self._occupancy()

    def answered(self, endpoint: str, status: int, started: float) -> None:
        """Count an HTTP answer and its duration."""
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()
        self.duration.labels(endpoint=endpoint).observe(time.perf_counter() - started)

    def first_token(self, endpoint: str, started: float) -> None:
        """Observe time to first token."""
        self.ttft.labels(endpoint=endpoint).observe(time.perf_counter() - started)

    def finished(self, stats: device_pb2.GenerateStats) -> None:
        """Add a finished generation's tokens and times (as the device measured them)."""
        self.prompt_tokens.inc(stats.prefilled_tokens)
        self.cached_tokens.inc(max(stats.prompt_tokens - stats.prefilled_tokens, 0))
        self.tokens_predicted.inc(stats.completion_tokens)
        prompt_s = max(stats.ttft_ms - stats.queue_ms, 0.0) / 1000
        predict_s = max(stats.total_ms - stats.ttft_ms, 0.0) / 1000
        self.prompt_seconds.inc(prompt_s)
        self.predicted_seconds.inc(predict_s)
        if stats.prefill_tokens_per_second:
            self.prompt_tps.set(stats.prefill_tokens_per_second)
        if stats.decode_tokens_per_second:
            self.predicted_tps.set(stats.decode_tokens_per_second)
