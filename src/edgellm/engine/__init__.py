"""What runs one artifact, below the daemon, the host and the client: open and check it (artifact,
mnn_paths), the `Engine` protocol (base) and MNN's implementation (mnn, config), the KV cache and its
sliding window (kv_cache, kv_window), measured forward costs (costs) and its ArtifactInfo (wire).
"""
