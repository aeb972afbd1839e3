"""Host side of edgellm: quantization, evaluation, conversion, artifact store and deploy."""
