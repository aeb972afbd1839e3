"""Fixtures: a real exported artifact of a tiny Llama (see tests/tiny_quant.py)."""

from tests.tiny_quant import tiny_artifact, tiny_hf, tiny_model

__all__ = ["tiny_artifact", "tiny_hf", "tiny_model"]
