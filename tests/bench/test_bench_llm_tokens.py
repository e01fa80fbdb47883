"""The LLM servers' token check (bench/llm_tokens.py): two runs of one server that differ only in
rounding pass, memory lost or damaged does not."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from llm_tokens import LOGIT_ROUNDING, compared_tokens, request_difference  # noqa: E402

CLEAR = 3.0  # two highest logits this far apart: no rounding can swap them


def request(tokens: list[int], tops: list[tuple[float, float]] | None = None) -> dict:
    made = {"tokens": tokens}
    if tops is not None:
        made["top_logits"] = [list(top) for top in tops]
    return made


def test_runs_that_part_at_a_near_tie_agree_and_only_the_tokens_before_it_are_compared():
    tie = LOGIT_ROUNDING / 2
    alone = request([5, 6, 7, 8], [(9.0, 9.0 - CLEAR), (8.0, 8.0 - tie), (7.0, 6.0), (6.0, 5.0)])
    # Another rounding: the second token's near tie went the other way, and the text after it
    # is another text altogether.
    shared = request([5, 2, 3, 4], [(9.05, 9.05 - CLEAR), (8.01, 8.0), (1.0, 0.0), (2.0, 1.0)])
    assert request_difference(shared, alone) is None
    assert compared_tokens([{"requests": [shared]}], [{"requests": [alone]}]) == (1, 4)


def test_a_parting_between_logits_far_apart_is_a_difference():
    alone = request([5, 6, 7], [(9.0, 9.0 - CLEAR)] * 3)
    shared = request([5, 6, 1], [(9.0, 9.0 - CLEAR)] * 3)
    assert request_difference(shared, alone) == (
        "from token 2 of 3, its two highest logits 3.000 apart here and 3.000 alone")


def test_highest_logits_that_no_longer_agree_are_a_difference_even_with_the_same_tokens():
    # Weights come back damaged: the same greedy choices, on logits of another size.
    alone = request([5, 6, 7], [(9.0, 9.0 - CLEAR)] * 3)
    shared = request([5, 6, 7], [(9.0, 9.0 - CLEAR), (12.0, 12.0 - CLEAR), (9.0, 9.0 - CLEAR)])
    assert request_difference(shared, alone) == "highest logits 3.000 apart before token 3"


def test_a_run_that_gave_no_logits_is_held_to_every_token():
    alone = request([5, 6, 7], [(9.0, 9.0)] * 3)  # ties everywhere, but no logits to weigh
    assert request_difference(request([5, 6, 1]), alone) == "from token 2 of 3"
    assert request_difference(request([5, 6, 7]), alone) is None
    assert request_difference(request([5, 6]), request([5, 6, 7])) == "from token 2 of 3"
