"""How rpc_failure words a gRPC error the client library, not the server, produced."""

from __future__ import annotations

import grpc
from grpc.aio import AioRpcError, Metadata

from edgellm.client.failures import FAILED, Peer, rpc_failure


def _error(code: grpc.StatusCode, details: str) -> AioRpcError:
    return AioRpcError(code, Metadata(), Metadata(), details=details)


def test_the_client_send_race_is_explained_instead_of_internal_error_from_core() -> None:
    """grpc-aio reports a write cut off by the server's end of the call as INTERNAL 'Internal
    error from Core'; the user is told the server ended the stream and that a rerun resumes."""
    failure = rpc_failure(_error(grpc.StatusCode.INTERNAL, "Internal error from Core"), Peer())
    assert failure.exit_code == FAILED
    assert "Internal error from Core" not in failure.message
    assert "ended the stream while this client was still sending" in failure.message
    assert "resumes" in failure.message


def test_an_internal_error_the_server_wrote_keeps_its_own_words() -> None:
    failure = rpc_failure(_error(grpc.StatusCode.INTERNAL, "engine: the KV cache is corrupt"), Peer())
    assert failure.message == "engine: the KV cache is corrupt" and failure.exit_code == FAILED
