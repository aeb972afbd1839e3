"""The OpenAI-compatible HTTP gateway in front of a device daemon, with Prometheus metrics."""
