"""The daemon's gRPC layer: server, servicer, request validation, proto<->domain mapping, registration."""
