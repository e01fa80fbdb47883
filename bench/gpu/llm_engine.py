"""vLLM as it is, for bench/llm_servers.py's run `engines`: the same command line and JSON line as
bench/gpu/llm_server.py, but the server is vLLM's offline engine (`vllm.LLM`) over a Llama
config written to a temporary folder, with dummy weights (`load_format="dummy"`: no download)
and its own `gpu_memory_utilization` (0.9 by default, --share), which it takes of the card
cuMemGetInfo shows: under gemshare a memory_limit rule makes that the card it was told of
(--card-mib is not read here). Prompts are token ids, greedy.

The offline engine does not say when a request's first token came: each request is sent once
for one token (its time is taken as the time to first token) and once whole (its tokens, and
the time per output token from the difference). Untested where vLLM is not installed.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from vllm import LLM, SamplingParams

from llm_server import config_for


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params-b", type=float, default=3.0)
    parser.add_argument("--card-mib", type=int)
    parser.add_argument("--share", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--schedule", type=Path, required=True)
    parser.add_argument("--closed", action="store_true")
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--go", type=Path)
    options = parser.parse_args()
    arrivals = json.loads(options.schedule.read_text())
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llm-engine-") as folder:
        config = config_for(options.params_b)
        config.save_pretrained(folder)
        engine = LLM(model=folder, load_format="dummy", skip_tokenizer_init=True,
                     dtype="bfloat16", seed=options.seed, enforce_eager=True,
                     gpu_memory_utilization=options.share, max_model_len=2048)
        draw = random.Random(options.seed)
        prompts = [[draw.randrange(config.vocab_size) for _ in range(options.prompt)]
                   for _ in arrivals]
        first, whole = (SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
                        for n in (1, options.new_tokens))
        engine.generate([{"prompt_token_ids": prompts[0]}], first, use_tqdm=False)  # warm-up
        startup = time.perf_counter() - started
        if options.ready:
            options.ready.touch()
        while options.go and not options.go.exists():
            time.sleep(0.01)
        start = time.perf_counter()
        if options.go:
            start += max(0.0, float(options.go.read_text()) - time.time())
        served = []
        for index, arrival in enumerate(arrivals):
            due = time.perf_counter() if options.closed else start + arrival
            time.sleep(max(0.0, due - time.perf_counter()))
            began, wall = time.perf_counter(), time.time()
            engine.generate([{"prompt_token_ids": prompts[index]}], first, use_tqdm=False)
            ttft = time.perf_counter() - began
            out = engine.generate([{"prompt_token_ids": prompts[index]}], whole, use_tqdm=False)
            tokens = list(out[0].outputs[0].token_ids)
            rest = time.perf_counter() - began - ttft
            served.append({"index": index, "tokens": tokens, "ttft_s": began - due + ttft,
                           "tpot_s": max(rest - ttft, 0.0) / max(1, options.new_tokens - 1),
                           "first_token_wall": wall + ttft, "arrival_s": due - start,
                           "end_s": time.perf_counter() - start})
    print(json.dumps({"startup_s": startup, "weights_bytes": None, "pool_bytes": None,
                      "layers": config.num_hidden_layers, "requests": served}))


if __name__ == "__main__":
    main()
