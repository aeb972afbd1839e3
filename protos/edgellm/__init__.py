"""edgellm gRPC contract (generated stubs live in edgellm.v1)."""
