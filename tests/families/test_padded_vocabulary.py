"""A vocabulary padded beyond its tokenizer (Qwen2.5: 151,936 rows, 151,665 tokens) streams safely.

A real model can generate an id the tokenizer lacks (every random-weight shape in bench_scale
does, most of the time). The tiny qwen2 here pads the SmolLM2 tokenizer's 49,152 ids by 271, as
Qwen2.5 does; a logit_bias pushes greedy onto a padded id, so every generated token is one without
text. The daemon (real MNN engine, real gRPC) must stream them all, each with an empty text delta.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from edgellm.common.token_table import TokenTable
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.engine.artifact import open_artifact
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc
from tests.families.test_end_to_end import NEW_TOKENS
from tests.tiny_families import build_tiny

TOKENIZER_IDS = 49152
PADDED = TOKENIZER_IDS + 271  # Qwen2.5's padding: 151,936 - 151,665
PADDED_ID = PADDED - 7  # an id no tokenizer piece has


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny padded-vocabulary qwen2, converted with the default preset (through the gate)."""
    from edgellm.host.convert.pipeline import convert

    root = tmp_path_factory.mktemp("padded")
    hf = build_tiny("qwen2", root / "hf", vocab_size=PADDED)
    convert(str(hf), root / "artifact")
    return root / "artifact"


@pytest_asyncio.fixture
async def daemon(artifact: Path, tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    """A real daemon (MNN engine) serving the artifact, on port 0."""
    config = DaemonConfig.of(
        port=0, model=artifact, data_dir=tmp_path / "data", disk_reserve_bytes=0, insecure_loopback=True
    )
    running = await start_server(config)
    yield running
    await running.stop(0)


def test_the_artifact_records_the_model_vocabulary_and_the_tokenizer_table(artifact: Path) -> None:
    loaded = open_artifact(artifact)
    assert loaded.manifest.model.vocab_size == PADDED
    table = TokenTable(loaded.token_table)
    assert len(table) == TOKENIZER_IDS and table.bytes_of(PADDED_ID) == b""


async def test_generating_ids_the_tokenizer_lacks_streams_empty_pieces_to_the_end(
    daemon: RunningDaemon,
) -> None:
    request = device_pb2.GenerateRequest(
        messages=[common_pb2.ChatMessage(role="user", content="Hello")],
        max_new_tokens=NEW_TOKENS,
        sampling=device_pb2.SamplingParams(temperature=0.0, logit_bias={PADDED_ID: 100.0}),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
        replies = [r async for r in device_pb2_grpc.DeviceDaemonStub(channel).Generate(request)]
    tokens = [t for r in replies for t in r.token_ids]
    assert tokens == [PADDED_ID] * NEW_TOKENS
    assert "".join(r.text for r in replies) == ""
    assert replies[-1].finish_reason == device_pb2.FINISH_REASON_LENGTH
    assert replies[-1].stats.completion_tokens == NEW_TOKENS
