"""L10: an artifact's config.json cannot switch MNN to writing files: the daemon's overrides turn
kvcache_mmap, use_cached_mmap and use_mmap off and point tmp_path at the daemon's own directory.
Real MNN 3.6.1 with the default artifact; what MNN ends up using is read back with dump_config."""

from __future__ import annotations

import json
from pathlib import Path

from edgellm.common.mnn_llm import MnnLlm
from edgellm.engine.config import EngineConfig

HOSTILE = {
    "kvcache_mmap": True,
    "use_cached_mmap": True,
    "use_mmap": True,
    "prefix_cache_path": "../../escaped-prefix-cache",
}


def test_l10_a_config_that_turns_on_mnns_file_writing_keys_ends_with_them_off(
    default_artifact: Path, tmp_path: Path
) -> None:
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    for f in default_artifact.iterdir():
        if f.name != "config.json":
            (artifact / f.name).symlink_to(f.resolve())
    config = json.loads((default_artifact / "config.json").read_text())
    evil = tmp_path / "evil"
    (artifact / "config.json").write_text(json.dumps({**config, **HOSTILE, "tmp_path": str(evil)}))
    scratch = tmp_path / "data" / "mnn-tmp"
    scratch.mkdir(parents=True)
    llm = MnnLlm.open(
        artifact / "config.json", EngineConfig(threads=1, scratch_dir=str(scratch)).mnn_overrides()
    )
    used = llm.settings()
    assert used["kvcache_mmap"] is False and used["use_cached_mmap"] is False and used["use_mmap"] is False
    assert used["tmp_path"] == str(scratch)
    assert used["prefix_cache_path"] == "prefixcache"
    llm.forward([1, 2, 3])
    assert not evil.exists() and not (tmp_path / "escaped-prefix-cache").exists()
