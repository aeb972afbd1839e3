"""Generated gRPC contract, version 1."""
