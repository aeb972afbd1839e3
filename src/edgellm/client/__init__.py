"""The laptop side: the `edgellm` command and a small Python client library."""
