"""The device daemon: MNN engine, gRPC server, telemetry and governor. Never imports torch."""
