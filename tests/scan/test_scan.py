"""Operator scan on a real exported graph, against the shipped per-backend tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgellm.host.scan.scan import UnsupportedOperators, op_counts, scan
from edgellm.host.scan.support import backends, support_for


def test_tables_cite_their_source() -> None:
    assert set(backends()) == {"cpu", "opencl", "vulkan", "npu"}
    for b in backends():
        s = support_for(b)
        assert "alibaba/MNN" in s.source and "github.com/alibaba/MNN/tree/" in s.source and s.how
        assert "Convolution" in s.native


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="choose one of cpu, opencl, vulkan, npu"):
        support_for("tpu")


def test_geometry_ops_need_raster() -> None:
    npu = support_for("npu")
    assert not npu.geometry and not npu.supports("Attention")
    assert support_for("opencl").supports("Squeeze")  # rewritten to Raster, which OpenCL has


def test_scan_real_graph(tiny_artifact: tuple[Path, dict[str, Any]]) -> None:
    path, _ = tiny_artifact
    cpu = scan(path, "cpu")
    counts = {o.op: o.count for o in cpu.ops}
    assert counts["Convolution"] == 15 and counts["Attention"] == 2 and counts["LayerNorm"] == 5
    assert cpu.fallback == []
    npu = scan(path / "llm.mnn", "npu")
    assert "Attention" in npu.fallback and npu.fallback_nodes >= 2
    assert "NO -> cpu fallback" in npu.table()
    with pytest.raises(UnsupportedOperators, match="--allow-fallback"):
        scan(path, "npu", allow_fallback=False)


def test_op_counts_include_subgraphs() -> None:
    graph = {"oplists": [{"type": "A"}], "subgraphs": [{"nodes": [{"type": "A"}, {"type": "B"}]}]}
    assert op_counts(graph) == {"A": 2, "B": 1}


def test_scan_cli_exit_codes(
    tiny_artifact: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    from edgellm.cli import main

    path, _ = tiny_artifact
    assert main(["scan", str(path), "--backend", "npu"]) == 1
    assert "--allow-fallback" in capsys.readouterr().err
    assert main(["scan", str(path), "--backend", "npu", "--allow-fallback"]) == 0
    assert main(["scan", str(path), "--backend", "opencl", "--json"]) == 0
    assert '"fallback": []' in capsys.readouterr().out
