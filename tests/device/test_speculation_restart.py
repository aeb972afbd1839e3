"""`fast` answers a request with the same tokens after a daemon restart, however the load timed.

The real default model behind a real daemon, started twice on the same artifact and settings; the
second start's forward-cost timings differ from the first's, as they do between starts on a shared
machine (issue 31: a grounded answer changed after a restart because its draft lengths followed
those timings, and W4A8's batched logits differ slightly from one-token ones, docs/engine.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from edgellm.client.aio import connect
from edgellm.client.params import GenerateParams
from edgellm.common.channel import ChannelSecurity
from edgellm.device.core import tuner
from edgellm.device.decoding import measure_forward_costs
from edgellm.engine.base import Engine
from edgellm.engine.costs import ForwardCosts
from tests.daemons import loopback_daemon

# Two grounded prompts whose greedy `fast` answer changed on main (4a0f10c) when the timed verify
# costs changed as below (bench/prompts/spec_grounded.jsonl rows 4 and 14, copied here so the test
# does not move with the bench's sets), and a seeded sampled request: its random draws per verify
# follow the draft lengths too.
SUMMARY = "Summarise the following passage, quoting its key sentences.\n\n"
MERIDIAN = (
    "The only daily newspaper printed in the city is The Meridian Star, which has been in operation "
    "since 1898. The paper was originally named The Evening Star but was renamed in 1915 and has been "
    "Meridian's only daily newspaper since 1921. With a daily circulation of about 12,000 in March "
    "2010, the paper serves Lauderdale County as well as adjacent portions of western Alabama and "
    "eastern Mississippi."
)
BANG = (
    "B of the Bang originally stood 56 metres (184 ft) tall with 180 hollow tapered steel columns or "
    "spikes radiating from a central core. It was angled at 30 degrees and supported by five 25 m "
    "(82 ft) long, tapered steel legs which connected to the spikes 22 m (72 ft) above the ground. The "
    "sculpture weighed 165 tonnes, with the concrete in the foundations weighing over 1,000 tonnes, "
    "including a 400 m2 (4,300 sq ft) reinforced concrete slab. The foundations are 20 m (66 ft) deep."
)
REQUESTS = (
    GenerateParams(messages=(("user", SUMMARY + MERIDIAN),), max_new_tokens=64, speculation="fast"),
    GenerateParams(messages=(("user", SUMMARY + BANG),), max_new_tokens=64, speculation="fast"),
    GenerateParams(
        messages=(("user", SUMMARY + BANG),), max_new_tokens=64, speculation="fast", temperature=0.8, seed=7
    ),
)

Measure = Callable[[Engine, ForwardCosts, list[int], int], None]


def skewed(measure: Measure, factor: float) -> Measure:
    """The load-time timing (the test hook: `tuner.measure_forward_costs`, the one timing a load
    takes), with verifies of 4 and 8 drafts timed `factor` times as long: what a start on a busier
    or quieter moment of a shared machine records."""

    def timed(engine: Engine, costs: ForwardCosts, prompt: list[int], repeats: int = 5) -> None:
        measure(engine, costs, prompt, repeats)
        for length, seconds in costs.samples.items():
            if length >= 5:
                costs.samples[length] = [s * factor for s in seconds]

    return timed


async def _answers(artifact: Path, data_dir: Path) -> list[tuple[list[int], int]]:
    """Start a daemon, send every request, stop it: each answer's tokens and drafted-token count."""
    out = []
    async with loopback_daemon(artifact, data_dir, threads=2, draft_max=8) as running:
        client = connect(f"127.0.0.1:{running.port}", ChannelSecurity.insecure_loopback())
        try:
            for params in REQUESTS:
                responses = [msg async for msg in client.stub.Generate(params.to_proto())]
                tokens = [t for r in responses for t in r.token_ids]
                out.append((tokens, responses[-1].stats.draft_tokens))
        finally:
            await client.channel.close()
    return out


async def test_a_fast_answer_is_the_same_after_a_restart_that_timed_the_forward_costs_differently(
    default_artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each start has its own data dir (nothing cached between them: another device of the same
    kind, or a first start whose timings were contended and not saved) and its own skew."""
    measure = measure_forward_costs
    monkeypatch.setattr(tuner, "measure_forward_costs", skewed(measure, 0.5))
    first = await _answers(default_artifact, tmp_path / "first")
    monkeypatch.setattr(tuner, "measure_forward_costs", skewed(measure, 4.0))
    second = await _answers(default_artifact, tmp_path / "second")
    for params, (tokens, drafted), (again, drafted_again) in zip(REQUESTS, first, second, strict=True):
        assert tokens == again, f"{params.messages[0][1][60:100]!r} T={params.temperature}: answer changed"
        assert drafted > 0 and drafted == drafted_again  # it drafted, with the same lengths both times
