"""The pure parts of the bench-gpu part llm_servers (bench/llm_servers.py): its settings, the
open-loop schedule, the refusal to oversubscribe the real card, and the figures and token
checks made from what the servers print. The part's whole run, with stand-in servers and real
schedulers, is tests/bench/test_scenario_registry.py's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import llm_servers  # noqa: E402


@pytest.mark.parametrize("environ, message", [
    ({"LLM_IDLE_S": "soon"}, "LLM_IDLE_S is 'soon'; give two seconds"),
    ({"LLM_IDLE_S": "30,5"}, "give the shortest idle span first"),
    ({"LLM_SERVERS": "1"}, "servers share a card from two on"),
    ({"LLM_REQUESTS": "0"}, "LLM_REQUESTS is '0'; give a number above 0"),
    ({"LLM_PARAMS_B": "big"}, "LLM_PARAMS_B is 'big'; give a number"),
    ({"LLM_RUNS": "shared,alone"}, "LLM_RUNS is 'shared,alone'; choose from shared, together"),
    ({"LLM_RUNS": " , "}, "LLM_RUNS is ' , '; choose from"),
])
def test_settings_it_cannot_use_are_named(environ, message):
    with pytest.raises(ValueError, match=message):
        llm_servers.settings(environ)


def test_the_runs_asked_for_are_the_ones_chosen_every_one_by_default():
    assert llm_servers.settings({})["runs"] == ["shared", "together", "restart", "engines",
                                                "alone_again"]
    assert llm_servers.settings({"LLM_RUNS": "shared, restart"})["runs"] == ["shared", "restart"]


def test_the_shared_runs_are_weighed_against_both_alone_runs_one_before_and_one_after():
    """A card whose speed drifts between the first alone run and the shared one (30 ms per
    token alone, 37.6 shared, on an H200 where alone runs took 30-46 ms) is judged against the
    mean of the alone runs on either side of the shared ones; with one of them failed, the
    first alone run stands."""
    tokens = [[1, 2], [3, 4]]
    first = llm_servers.figures([served([9.0, 0.2], tokens, tpot=0.030)] * 2)
    again = llm_servers.figures([served([9.0, 0.3], tokens, tpot=0.044)] * 2)
    shared = llm_servers.figures([served([9.0, 0.5], tokens, tpot=0.0376)] * 2,
                                 [served([9.0, 0.2], tokens, tpot=0.030)] * 2)
    together = llm_servers.figures([served([9.0, 0.24], tokens, tpot=0.036)] * 2,
                                   [served([9.0, 0.2], tokens, tpot=0.030)] * 2)
    assert shared["tpot_ratio"] == pytest.approx(1.2533, abs=1e-4)  # against the first alone
    result = {"alone": first, "alone_again": again, "shared": shared, "together": together,
              "engines": {"skipped": "vLLM is not installed"}}
    llm_servers.against_both_alone(result)
    assert result["alone_tpot_median_s"] == pytest.approx(0.037)
    assert shared["tpot_ratio"] == pytest.approx(0.0376 / 0.037)
    assert together["ttft_ratio"] == pytest.approx(0.24 / 0.25)
    failed = {"alone": first, "alone_again": {"error": "RuntimeError: a server did not get ready"},
              "shared": {**shared, "tpot_ratio": 1.25}}
    llm_servers.against_both_alone(failed)
    assert failed["shared"]["tpot_ratio"] == 1.25 and "alone_tpot_median_s" not in failed


def test_the_servers_take_turns_each_idle_within_the_span_asked():
    arrivals = llm_servers.schedule(3, 6, (5.0, 30.0), seed=4)
    assert [len(times) for times in arrivals] == [6, 6, 6]
    merged = sorted((at, server) for server, times in enumerate(arrivals) for at in times)
    assert [server for _, server in merged] == [0, 1, 2] * 6  # in turn, one request each
    for times in arrivals:
        idle = [later - earlier for earlier, later in zip(times, times[1:])]
        assert all(5.0 - 1e-6 <= span <= 30.0 + 1e-6 for span in idle), idle
    assert llm_servers.schedule(3, 6, (5.0, 30.0), seed=4) == arrivals  # the same each run
    assert llm_servers.schedule(3, 6, (5.0, 30.0), seed=5) != arrivals


def test_servers_that_would_take_over_half_the_free_memory_are_not_run():
    chosen = llm_servers.settings({"LLM_CARD_MIB": "39000"})
    assert llm_servers.refusal(chosen, [143000]) is None
    reason = llm_servers.refusal(chosen, [60000])
    assert "more than half of the 60000 MiB free" in reason
    assert llm_servers.refusal(chosen, []) == "nvidia-smi reported no free memory"


def served(ttfts: list[float], tokens: list[list[int]], tpot: float = 0.01) -> dict:
    return {"startup_s": 1.0, "pool_bytes": 1, "weights_bytes": 1,
            "requests": [{"ttft_s": ttft, "tpot_s": tpot, "tokens": made}
                         for ttft, made in zip(ttfts, tokens)]}


def test_figures_leave_out_each_servers_first_request_and_compare_with_alone():
    tokens = [[1, 2], [3, 4], [5, 6]]
    alone = [served([9.0, 0.2, 0.2], tokens), served([9.0, 0.2, 0.2], tokens)]
    run = llm_servers.figures([served([9.0, 0.4, 0.8], tokens, tpot=0.012),
                               served([9.0, 0.4, 0.4], tokens, tpot=0.012)], alone)
    assert run["ttft_p50_s"] == 0.4 and run["ttft_p99_s"] == 0.8  # the first ones (9 s) out
    assert run["ttft_ratio"] == pytest.approx(2.0)
    assert run["tpot_ratio"] == pytest.approx(1.2)
    assert run["requests"] == 6 and run["tokens_match"] is True


@pytest.mark.parametrize("change", ["token", "request lost", "server lost"])
def test_a_token_that_differs_from_alone_or_a_request_lost_fails_the_check(change):
    tokens = [[1, 2], [3, 4]]
    alone = [served([0.1, 0.1], tokens), served([0.1, 0.1], tokens)]
    run = [served([0.1, 0.1], tokens), served([0.1, 0.1], tokens)]
    if change == "token":
        run[1]["requests"][1]["tokens"] = [3, 5]
    elif change == "request lost":
        run[0]["requests"].pop()
    else:
        run.pop()
    assert llm_servers.token_differences(run, alone) != []


def test_the_vllm_run_is_skipped_saying_why_where_vllm_cannot_be_imported():
    assert llm_servers.engine_missing("false") == "vLLM is not installed for false"
    assert "could not ask /nonexistent/python" in llm_servers.engine_missing("/nonexistent/python")


def test_the_part_is_skipped_saying_why_where_its_python_has_no_transformers(monkeypatch,
                                                                            tmp_path):
    monkeypatch.setattr(llm_servers, "free_mib", lambda: [143000])
    result = llm_servers.measure("false", Path("/nonexistent/libnvs.so"), tmp_path)
    assert result["skipped"] == "PyTorch with transformers is not installed for false"
    assert not list(tmp_path.iterdir())  # nothing ran


def test_the_differences_say_which_request_parts_from_alone_and_from_which_token():
    alone = [served([0.1, 0.1], [[1, 2, 3], [4, 5, 6]])]
    run = [served([0.1, 0.1], [[1, 2, 3], [4, 9, 9]])]
    for number, request in enumerate(run[0]["requests"]):
        request["index"] = number
    assert llm_servers.token_differences(run, alone) == ["server 0 request 1: from token 1 of 3"]
    figures = llm_servers.figures(run, alone)
    assert figures["tokens_match"] is False
    assert figures["tokens_differ"] == ["server 0 request 1: from token 1 of 3"]
    assert "TOKENS DIFFER (server 0 request 1: from token 1 of 3)" in \
        llm_servers.run_line("shared", figures)
