"""bench/bench_spec_cost.py's replay of the drafting loop and its break-even acceptance (no model)."""

from __future__ import annotations

import pytest

from bench.bench_spec_cost import break_even, replay, speedup


def test_a_copied_answer_is_verified_in_full_drafts_and_a_novel_one_in_plain_steps() -> None:
    context = list(range(100, 140))
    assert replay(context, context[:19], 8) == [1, 9, 9]  # one plain step until a 2-gram matches
    assert replay(context, list(range(500, 520)), 8) == [1] * 19


def test_a_rejected_draft_emits_its_accepted_prefix_plus_one_token() -> None:
    context = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    answer = [1, 2, 3, 4, 50, 51]  # drafts 3, 4, 5, 6 after "1 2"; 5 is rejected
    assert replay(context, answer, 4) == [1, 5, 1]


def test_speedup_is_plain_time_over_the_replayed_forwards() -> None:
    context = list(range(100, 140))
    costs = {1: 1.0, 2: 1.0, 3: 1.0, 5: 1.0, 9: 2.0}
    assert speedup(context, context[:19], 8, costs) == pytest.approx(18 / 5)


@pytest.mark.parametrize(("cost", "k", "a"), [(1.0, 1, 0.0), (1.5, 1, 0.5), (1.75, 2, 0.5), (2.0, 1, 1.0)])
def test_break_even_acceptance_yields_as_many_tokens_as_the_verify_costs(
    cost: float, k: int, a: float
) -> None:
    assert break_even(cost, k) == pytest.approx(a, abs=1e-6)
