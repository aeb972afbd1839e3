"""Conversion of the default GGUF / a Hugging Face checkpoint into a verified MNN artifact."""
