"""Engines: the `Engine` protocol the daemon drives (base), MNN's implementation (mnn) and its adapter."""
