"""Fixtures: tiny Llama models and a real exported artifact (see tests/tiny_quant.py)."""

from tests.tiny_quant import tiny_artifact, tiny_hf, tiny_model

__all__ = ["tiny_artifact", "tiny_hf", "tiny_model"]
