"""bench-gpu part `llm_servers`: inference servers that each size themselves to the whole card
share one GPU (docs/llm-serving.md; the fake driver's is bench/llm_servers_fake.py).

N copies of bench/gpu/llm_server.py (a Llama-architecture decoder of LLM_PARAMS_B billion
parameters, random weights, bf16), each told the card holds LLM_CARD_MIB and sizing its KV
cache pool from that as vLLM does (90% of it, less what PyTorch holds after a profile pass,
allocated and cleared at start), serve requests (LLM_PROMPT tokens of prompt, LLM_NEW_TOKENS
new ones, greedy) from one open-loop schedule that alternates between them, each server idle
LLM_IDLE_S (a range) between its requests. Runs, each from a fresh start:

- `alone`: the servers with no layer on the real card, which holds them all (the ideal);
- `shared`: under libnvs.so and a scheduler whose --capacity-mib is the card they were told
  of, in mode `on`: only one server's reservation fits, so every switch makes room;
- `together`: the same in mode `auto` under a capacity that holds them all (two such cards'
  worth): all hold the card at once, and nothing moves;
- `restart`: each server started for one request, the start-up counted, as a setup that stops
  one server and starts the other at each switch would pay (Ollama, llama-swap);
- `engines`: vLLM as it is (bench/gpu/llm_engine.py), its `gpu_memory_utilization` unchanged,
  under the shared run's capacity; skipped where BENCH_PYTHON has no vLLM (SGLang is not run);
- `alone_again`: the servers alone once more, last: the runs between are weighed against the
  mean of both alone runs (a lent card's speed drifts: the alone runs' time per output token
  was 30.0 to 46 ms from one run to the next).

Every generated token of a shared run is checked against the same server alone, up to the
first where the two part at a near tie (bench/llm_tokens.py). Reported per run and server: time
to first token p50/p99 (of the requests after an idle span), time per output token, requests
served; for `shared`, the bytes each switch moved (the scheduler's log).
All the servers' memory stays under half the real card's free memory.

Environment: LLM_SERVERS (default 2), LLM_PARAMS_B (default 3), LLM_CARD_MIB (default 32768),
LLM_REQUESTS (per server, default 5), LLM_IDLE_S (default "5,15"), LLM_PROMPT (512),
LLM_NEW_TOKENS (64), LLM_SEED (1), LLM_LOGS=DIR (keep the shared runs' scheduler logs and
the servers' stderr), LLM_DEBUG=1 (libnvs's debug lines in that stderr: its moves, time-stamped),
LLM_RUNS (the runs after `alone`, which every other run is checked against: default
"shared,together,restart,engines,alone_again").
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpu_runs import (attempt, free_mib, inherited, keep_log, launch, percentile, printed,
                      private_scheduler, stderr_tail, stop, with_debug)
from llm_tokens import compared_tokens, token_differences
from scheduler_log import lock_events, switch_moves

WORKLOAD = Path(__file__).resolve().parent / "gpu" / "llm_server.py"
ENGINE = Path(__file__).resolve().parent / "gpu" / "llm_engine.py"  # vLLM, where installed
ENGINE_LABEL = "llm-engine"
TQ = 30
SHARE = 0.9  # of the card each server takes, as vLLM's gpu_memory_utilization
RUNS = ("shared", "together", "restart", "engines", "alone_again")
READY_TIMEOUT_S = 300
RUN_MARGIN_S = 120  # past the schedule's last arrival


def settings(environ=os.environ) -> dict:
    """The part's settings; a clear error for values it cannot use."""
    def number(name: str, default: str, kind=int):
        text = environ.get(name, default)
        try:
            value = kind(text)
        except ValueError:
            raise ValueError(f"{name} is {text!r}; give a number") from None
        if value <= 0:
            raise ValueError(f"{name} is {text!r}; give a number above 0")
        return value

    low, _, high = environ.get("LLM_IDLE_S", "5,15").partition(",")
    try:
        idle = (float(low), float(high or low))
    except ValueError:
        raise ValueError(f"LLM_IDLE_S is {environ['LLM_IDLE_S']!r}; give two seconds, as "
                         "\"5,30\"") from None
    if not 0 < idle[0] <= idle[1]:
        raise ValueError(f"LLM_IDLE_S is {environ['LLM_IDLE_S']!r}; give the shortest idle "
                         "span first, above 0")
    servers = number("LLM_SERVERS", "2")
    if servers < 2:
        raise ValueError("LLM_SERVERS is 1; servers share a card from two on")
    runs = [run.strip() for run in environ.get("LLM_RUNS", ",".join(RUNS)).split(",")
            if run.strip()]
    if not runs or set(runs) - set(RUNS):
        raise ValueError(f"LLM_RUNS is {environ.get('LLM_RUNS')!r}; choose from "
                         f"{', '.join(RUNS)}")
    return {"servers": servers, "runs": runs, "params_b": number("LLM_PARAMS_B", "3", float),
            "card_mib": number("LLM_CARD_MIB", "32768"),
            "requests": number("LLM_REQUESTS", "5"), "idle_s": idle,
            "prompt": number("LLM_PROMPT", "512"), "new_tokens": number("LLM_NEW_TOKENS", "64"),
            "seed": number("LLM_SEED", "1"), "share": SHARE, "tq": TQ}


def schedule(servers: int, requests: int, idle_s: tuple[float, float], seed: int) -> list:
    """Each server's arrival times, in seconds from the start: the servers take turns in a fixed
    order, one request each, each gap between two arrivals drawn so that every server idles
    between idle_s[0] and idle_s[1] between its own requests (its idle span is the servers'
    gaps in between)."""
    draw = random.Random(seed)
    times: list[list[float]] = [[] for _ in range(servers)]
    now = 1.0
    for turn in range(servers * requests):
        times[turn % servers].append(round(now, 3))
        now += draw.uniform(idle_s[0], idle_s[1]) / servers
    return times


def refusal(chosen: dict, free: list[int]) -> str | None:
    """Why the part must not run now, or None: with no layer every server's memory is on the
    card at once, and that must stay under half of what is free."""
    if not free:
        return "nvidia-smi reported no free memory"
    needed = chosen["servers"] * chosen["card_mib"] * chosen["share"]
    if needed > min(free) / 2:
        return (f"{chosen['servers']} servers of {chosen['card_mib'] * chosen['share']:.0f} MiB "
                f"are more than half of the {min(free)} MiB free (choose a smaller "
                "LLM_CARD_MIB or fewer LLM_SERVERS)")
    return None


def server_command(python: str, directory: Path, chosen: dict, index: int,
                   times: list[float], workload: Path | None = None) -> list[str]:
    """Server `index`'s command line, its schedule written beside its output."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"schedule-{index}.json").write_text(json.dumps(times))
    return [python, str(workload or WORKLOAD), "--params-b", str(chosen["params_b"]),
            "--card-mib", str(chosen["card_mib"]), "--share", str(chosen["share"]),
            "--seed", str(chosen["seed"] + index), "--prompt", str(chosen["prompt"]),
            "--new-tokens", str(chosen["new_tokens"]),
            "--schedule", str(directory / f"schedule-{index}.json")]


def run_servers(python: str, env: dict, directory: Path, chosen: dict,
                arrivals: list, workload: Path | None = None) -> list[dict]:
    """The servers, each with its arrivals, from one go moment once all are ready; what each
    printed."""
    directory.mkdir(parents=True, exist_ok=True)
    go = directory / "go"
    processes = []
    try:
        for index, times in enumerate(arrivals):
            command = server_command(python, directory, chosen, index, times, workload)
            processes.append(launch(command + ["--ready", str(directory / f"ready-{index}"),
                                               "--go", str(go)], env,
                                    directory / f"server-{index}"))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all((directory / f"ready-{i}").exists() for i in range(len(arrivals))):
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError("a server did not get ready: " + stderr_tail(directory, "server"))
            time.sleep(0.1)
        staged = directory / "go.new"  # renamed into place: a server never reads half of it
        staged.write_text(repr(time.time() + 0.5))
        staged.rename(go)
        last = max((times[-1] for times in arrivals if times), default=0.0)
        deadline = time.monotonic() + last + RUN_MARGIN_S
        for process in processes:
            process.wait(max(0.0, deadline - time.monotonic()))
    finally:
        stop(processes)
    return [printed(directory / f"server-{index}") for index in range(len(arrivals))]


def figures(servers: list[dict], alone: list[dict] | None = None) -> dict:
    """A run's figures: time to first token of the requests after an idle span (every one but
    each server's first), p50 and p99, per server and over all; time per output token; and,
    beside the servers alone, the ratios and whether every token is the same."""
    def ttfts(server: dict) -> list[float]:
        return [request["ttft_s"] for request in server["requests"][1:]]

    every = [ttft for server in servers for ttft in ttfts(server)]
    tpot = statistics.median(r["tpot_s"] for server in servers for r in server["requests"])
    result = {"ttft_p50_s": percentile(every, 0.5), "ttft_p99_s": percentile(every, 0.99),
              "tpot_median_s": tpot,
              "requests": sum(len(server["requests"]) for server in servers),
              "servers": [{"ttft_p50_s": percentile(ttfts(server), 0.5),
                           "ttft_p99_s": percentile(ttfts(server), 0.99),
                           "tpot_median_s": statistics.median(
                               r["tpot_s"] for r in server["requests"]),
                           "requests": len(server["requests"]),
                           "startup_s": server["startup_s"], "pool_bytes": server["pool_bytes"],
                           "weights_bytes": server["weights_bytes"]} for server in servers]}
    if alone is not None:
        differences = token_differences(servers, alone)
        result["tokens_match"], result["tokens_differ"] = not differences, differences[:8]
        result["tokens_compared"] = compared_tokens(servers, alone)
        if result["ttft_p50_s"] is not None and figures(alone)["ttft_p50_s"]:
            result["ttft_ratio"] = result["ttft_p50_s"] / figures(alone)["ttft_p50_s"]
        result["tpot_ratio"] = tpot / figures(alone)["tpot_median_s"]
    return result


def shared_run(python: str, library: Path, directory: Path, chosen: dict, arrivals: list,
               capacity_mib: int, mode: str, alone: list[dict]) -> dict:
    with private_scheduler(library, directory, tq=TQ, anti_thrash=mode,
                           capacity_mib=capacity_mib) as (scheduler, env):
        servers = run_servers(python, with_debug(env, "LLM_DEBUG"), directory, chosen, arrivals)
        scheduler.check_running()
    log = scheduler.log_path.read_text()
    keep_log(log, "LLM_LOGS", f"{directory.name}.log")
    for index in range(len(arrivals)):
        keep_log((directory / f"server-{index}.err").read_text(), "LLM_LOGS",
                 f"{directory.name}-server-{index}.err")
    switches = switch_moves(log, warm_up=0)
    return {**figures(servers, alone), **lock_events(log), "capacity_mib": capacity_mib,
            "mode": mode,
            "switches": len(switches),
            "switch_bytes_median": statistics.median(switches) if switches else None,
            "switch_bytes_max": max(switches, default=None),
            "switch_bytes_after_warm_up_max": max(switch_moves(log, chosen["servers"]),
                                                  default=None)}


def restart_run(python: str, directory: Path, chosen: dict, alone: list[dict]) -> dict:
    """Each server started for one request, alone: what a request waits for when a switch
    starts its server anew, from the process's start to its first token. Its tokens, beside
    the same request of the run alone (no layer either), tell whether the check of tokens can
    hold at all: two runs of one server with no layer must agree."""
    waits, started = [], []
    for index in range(chosen["servers"]):
        command = server_command(python, directory, chosen, index, [0.0]) + ["--closed"]
        launched = time.time()
        process = launch(command, inherited(), directory / f"server-{index}")
        try:
            process.wait(READY_TIMEOUT_S)
        finally:
            stop([process])
        server = printed(directory / f"server-{index}")
        waits.append(server["requests"][0]["first_token_wall"] - launched)
        started.append(server)
    firsts = [{**server, "requests": server["requests"][:1]} for server in alone]
    differences = token_differences(started, firsts)
    return {"ttft_s": waits, "ttft_p50_s": statistics.median(waits),
            "tokens_match": not differences, "tokens_differ": differences,
            "tokens_compared": compared_tokens(started, firsts)}


def alone_run(python: str, directory: Path, chosen: dict, arrivals: list) -> dict:
    """The servers with no layer; their output is kept apart (`raw`) for the token checks."""
    servers = run_servers(python, inherited(), directory, chosen, arrivals)
    return {**figures(servers), "raw": servers}


def missing(python: str, modules: str, what: str) -> str | None:
    """Why `python` cannot run a part's programs, or None: it must import `modules`."""
    try:
        done = subprocess.run([python, "-c", f"import {modules}"], capture_output=True,
                              timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not ask {python} for {what}: {exc}"
    return None if done.returncode == 0 else f"{what} is not installed for {python}"


def engine_missing(python: str) -> str | None:
    """Why the engines' run cannot be made, or None: vLLM must be importable by `python`."""
    return missing(python, "vllm", "vLLM")


def engines_run(python: str, library: Path, directory: Path, chosen: dict,
                arrivals: list) -> dict:
    """vLLM servers as they are, each with its gpu_memory_utilization unchanged, under the
    shared run's capacity; a memory_limit rule shows each the card it was told of, which it
    then takes 90% of, as the servers above do."""
    config = directory.parent / "engines.toml"
    config.write_text(f'[[rule]]\nmatch = {{ label = "{ENGINE_LABEL}" }}\n'
                      f'memory_limit = "{chosen["card_mib"]}MiB"\n')
    with private_scheduler(library, directory, args=["--config", str(config)], tq=TQ,
                           anti_thrash="on", capacity_mib=chosen["card_mib"]) as (scheduler, env):
        servers = run_servers(python, {**env, "GEMSHARE_LABEL": ENGINE_LABEL}, directory,
                              chosen, arrivals, ENGINE)
        scheduler.check_running()
    return {**figures(servers), **lock_events(scheduler.log_path.read_text())}


def measure(python: str, library: Path, directory: Path) -> dict:
    chosen = settings()
    reason = refusal(chosen, free_mib()) or missing(python, "torch, transformers",
                                                    "PyTorch with transformers")
    if reason:
        print(f"llm_servers skipped: {reason}", file=sys.stderr)
        return {**chosen, "skipped": reason}
    arrivals = schedule(chosen["servers"], chosen["requests"], chosen["idle_s"], chosen["seed"])
    result = {**chosen, "arrivals": arrivals}
    alone = result["alone"] = attempt("llm servers, alone", run_line, alone_run, python,
                                      directory / "alone", chosen, arrivals)
    reference = alone.pop("raw", None)
    if reference is None:
        return result
    one_card = chosen["card_mib"]
    for name, capacity, mode in (("shared", one_card, "on"),
                                 ("together", chosen["servers"] * one_card, "auto")):
        if name in chosen["runs"]:
            result[name] = attempt(f"llm servers, {name}", run_line, shared_run, python,
                                   library, directory / name, chosen, arrivals, capacity, mode,
                                   reference)
    if "restart" in chosen["runs"]:
        result["restart"] = attempt("llm servers, restart per switch", restart_line,
                                    restart_run, python, directory / "restart", chosen, reference)
    if "engines" in chosen["runs"]:
        absent = engine_missing(python)
        if absent:
            print(f"llm servers, vLLM: skipped ({absent})", file=sys.stderr)
            result["engines"] = {"skipped": absent}
        else:
            result["engines"] = attempt("llm servers, vLLM", run_line, engines_run, python,
                                        library, directory / "engines", chosen, arrivals)
    if "alone_again" in chosen["runs"]:
        again = attempt("llm servers, alone again", run_line, alone_run, python,
                        directory / "alone_again", chosen, arrivals)
        again.pop("raw", None)
        result["alone_again"] = again
        against_both_alone(result)
    return result


def against_both_alone(result: dict) -> None:
    """The shared runs' ratios to alone, taken again against the mean of both alone runs,
    one before them and one after, where both ran: the card's own drift then weighs on both
    sides alike."""
    alone = [result[name] for name in ("alone", "alone_again") if "error" not in result[name]]
    if len(alone) < 2:
        return
    tpot = statistics.mean(run["tpot_median_s"] for run in alone)
    ttfts = [run["ttft_p50_s"] for run in alone]
    ttft = statistics.mean(ttfts) if all(ttfts) else None
    result["alone_tpot_median_s"] = tpot
    for run in (result.get(name, {}) for name in ("shared", "together", "engines")):
        if "tpot_median_s" not in run:
            continue
        run["tpot_ratio"] = run["tpot_median_s"] / tpot
        if ttft and run.get("ttft_p50_s") is not None:
            run["ttft_ratio"] = run["ttft_p50_s"] / ttft


def run_line(name: str, run: dict) -> str:
    if "error" in run:
        lines = run["error"].strip().splitlines()
        return f"{name}: FAILED ({' ... '.join(dict.fromkeys([lines[0], lines[-1]]))})"
    line = (f"{name}: time to first token p50 {run['ttft_p50_s']:.3f} s, p99 "
            f"{run['ttft_p99_s']:.3f} s; per output token {run['tpot_median_s'] * 1000:.1f} ms; "
            f"{run['requests']} requests")
    if "tpot_ratio" in run:
        line += f"; per token {run['tpot_ratio']:.3f} of alone"
    if "switch_bytes_max" in run and run["switch_bytes_max"] is not None:
        line += (f"; {run['switches']} switches moved {run['switch_bytes_median'] / 2**30:.2f} "
                 f"GiB median, {run['switch_bytes_max'] / 2**30:.2f} GiB at most")
    return line + tokens_line(run)


def tokens_line(run: dict) -> str:
    if "tokens_match" not in run:
        return ""
    if run["tokens_match"]:
        compared, total = run.get("tokens_compared", (None, None))
        if compared is None or compared == total:
            return "; every token as alone"
        return (f"; tokens as alone up to near ties ({compared} of {total} compared, the rest "
                "after a tie)")
    return f"; TOKENS DIFFER ({', '.join(run.get('tokens_differ', []))})"


def restart_line(name: str, run: dict) -> str:
    if "error" in run:
        return run_line(name, run)
    return (f"{name}: time to first token {run['ttft_p50_s']:.1f} s (start-up included)"
            f"{tokens_line(run)}")


def print_llm_servers(part: dict) -> None:
    if "skipped" in part:
        print(f"llm servers: skipped ({part['skipped']})")
        return
    print(f"llm servers: {part['servers']} servers of {part['params_b']:g}B parameters, each "
          f"told of a {part['card_mib']} MiB card and taking {part['share']:.0%} of it; "
          f"{part['requests']} requests each ({part['prompt']} + {part['new_tokens']} tokens), "
          f"idle {part['idle_s'][0]:g}-{part['idle_s'][1]:g} s between them; TQ {part['tq']} s")
    for name in ("alone", "shared", "together"):
        if name in part:
            print(run_line(f"llm servers, {name}", part[name]))
    if "alone_again" in part:
        print(run_line("llm servers, alone again", part["alone_again"]))
    if "alone_tpot_median_s" in part:
        print(f"llm servers: the ratios above are to both alone runs' mean, "
              f"{part['alone_tpot_median_s'] * 1000:.1f} ms per output token")
    if "restart" in part:
        print(restart_line("llm servers, restart per switch", part["restart"]))
    engines = part.get("engines", {})
    if "skipped" in engines:
        print(f"llm servers, vLLM: skipped ({engines['skipped']})")
    elif engines:
        print(run_line("llm servers, vLLM", engines))
