"""edgellm: quantize an open LLM on a laptop, serve it from a phone over gRPC, keep it cool.

Subpackages, with imports flowing one way (docs/architecture.md):
`common` (the host↔device contract and shared plumbing) ← `device` (the phone's daemon) and
`host` (convert, quantize, evaluate) ← `client` (the laptop's client library and commands),
`deploy` (adb/Termux installer); `v1` holds the generated gRPC stubs; `cli` is the `edgellm` command.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("edgellm")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
