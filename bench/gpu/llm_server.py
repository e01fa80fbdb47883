"""An inference server for bench/llm_servers.py: a decoder of the Llama architecture built by
`transformers` from a config with random weights (no download; bf16), which sizes a KV cache
pool the way vLLM does and serves requests (a prompt of PROMPT tokens, NEW_TOKENS new ones,
greedy) at the times its schedule names.

Sizing, as vLLM's: after a profile forward pass of one prompt, the pool takes SHARE (0.9) of the
card's total (cuMemGetInfo's, no more than --card-mib) less what PyTorch holds (the weights and
the activations' cached blocks), allocated and cleared at start with cuMemsetD8 (see
docs/llm-serving.md: a cache cleared by a kernel, as torch.zeros does, is not seen as cleared).
Each request writes its keys and values into the pool's next free slots, as a paged engine's
cache kernel does, the slots taken in turn over the whole pool; attention itself runs on
transformers' own cache.

Arrivals are open-loop: each request is due at its time after the go moment whatever the
server is doing, and its time to first token counts from then. With --closed each request is
due when the previous one ends (the start-up baseline). Prints one JSON line at the end.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import time
from pathlib import Path

# Same kernels, same results: every run of a server must give the same tokens.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

PARAMS_PER_LAYER_3B = 100_663_296  # hidden 3072, MLP 8192, 8 KV heads of 128: Llama 3.2 3B's


def config_for(params_b: float) -> LlamaConfig:
    """Llama 3.2 3B's shape, its layer count scaled to the parameters asked for (at least 1);
    small sizes take a narrower shape, so that a test-sized server stays small."""
    if params_b >= 0.5:
        hidden, mlp, heads, kv_heads, vocab = 3072, 8192, 24, 8, 128256
        embed = vocab * hidden
        layers = max(1, round((params_b * 1e9 - embed) / PARAMS_PER_LAYER_3B))
    else:
        hidden, mlp, heads, kv_heads, vocab, layers = 512, 1536, 8, 4, 32000, 4
    return LlamaConfig(hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads,
                       vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=True,
                       torch_dtype="bfloat16")


def clear(tensor: torch.Tensor) -> None:
    """Zeros with the driver's memset, as engines that clear with cudaMemset do."""
    torch.cuda.synchronize()
    driver = ctypes.CDLL("libcuda.so.1")
    driver.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
    result = driver.cuMemsetD8_v2(tensor.data_ptr(), 0, tensor.numel() * tensor.element_size())
    if result != 0:
        raise RuntimeError(f"cuMemsetD8_v2 failed with CUDA error {result}")
    torch.cuda.synchronize()


def kv_pairs(cache) -> list:
    """Each layer's (keys, values) of transformers' cache, whichever version made it."""
    if hasattr(cache, "layers"):  # 4.54 and later
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    return list(cache.to_legacy_cache() if hasattr(cache, "to_legacy_cache") else cache)


class Server:
    def __init__(self, options):
        started = time.perf_counter()
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.manual_seed(options.seed)
        self.config = config_for(options.params_b)
        torch.set_default_dtype(torch.bfloat16)  # built in bf16: no fp32 copy held in cache
        with torch.device("cuda"):
            self.model = LlamaForCausalLM(self.config).eval()
        torch.set_default_dtype(torch.float32)
        self.prompt, self.new_tokens, self.seed = options.prompt, options.new_tokens, options.seed
        self.weights_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        self.generate(self.prompt_tokens(-1))  # the profile pass, as vLLM's
        _, total = torch.cuda.mem_get_info()
        card = min(total, options.card_mib << 20)
        self.pool_bytes = int(options.share * card) - torch.cuda.memory_reserved()
        if self.pool_bytes <= 0:
            raise SystemExit(f"no room for a KV cache: {options.share} of {card >> 20} MiB is "
                             f"less than the {torch.cuda.memory_reserved() >> 20} MiB PyTorch "
                             "holds; give a larger --card-mib or a smaller model")
        self.pool = torch.empty(self.pool_bytes, dtype=torch.uint8, device="cuda")
        clear(self.pool)
        self.next_slot = 0
        self.startup_s = time.perf_counter() - started

    def prompt_tokens(self, index: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1000 + index + 1)
        return torch.randint(0, self.config.vocab_size, (1, self.prompt), generator=generator)

    @torch.inference_mode()
    def generate(self, prompt: torch.Tensor) -> tuple[list[int], float, list, list]:
        """Greedy tokens; the time to the first; the layers' keys and values at the end; each
        token's two highest logits (a token chosen between near ties may differ between runs
        that differ only in rounding: bench/llm_servers.py's check needs to know)."""
        start = time.perf_counter()
        out = self.model(prompt.cuda(), use_cache=True)
        cache, (top, token) = out.past_key_values, out.logits[:, -1].float().topk(2)
        tops, token = [top], token[:, :1]
        tokens = [int(token)]  # int() waits for the GPU: the first token is out
        first = time.perf_counter() - start
        for _ in range(self.new_tokens - 1):
            out = self.model(token, past_key_values=cache, use_cache=True)
            cache, (top, token) = out.past_key_values, out.logits[:, -1].float().topk(2)
            tops.append(top)
            token = token[:, :1]
            tokens.append(int(token))
        return tokens, first, cache, torch.cat(tops).tolist()

    @torch.no_grad()
    def keep(self, cache) -> None:
        """Writes the request's keys and values into the pool's next slots, wrapping around."""
        for keys, values in kv_pairs(cache):
            for part in (keys, values):
                raw = part.contiguous().view(torch.uint8).flatten()
                if raw.numel() > self.pool_bytes:
                    return
                if self.next_slot + raw.numel() > self.pool_bytes:
                    self.next_slot = 0
                self.pool[self.next_slot:self.next_slot + raw.numel()].copy_(raw)
                self.next_slot += raw.numel()

    def serve(self, index: int, due: float) -> dict:
        """One request due at `due` (perf_counter): from then to the first token, then the
        time per output token after it."""
        began, wall = time.perf_counter(), time.time()
        tokens, first, cache, tops = self.generate(self.prompt_tokens(index))
        generated = time.perf_counter()
        self.keep(cache)
        torch.cuda.synchronize()
        return {"index": index, "tokens": tokens, "top_logits": tops,
                "ttft_s": began - due + first,
                "tpot_s": (generated - began - first) / max(1, self.new_tokens - 1),
                "first_token_wall": wall + first, "end_s": time.perf_counter()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params-b", type=float, default=3.0)
    parser.add_argument("--card-mib", type=int, required=True)
    parser.add_argument("--share", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--schedule", type=Path, required=True,
                        help="a JSON list of arrival times, seconds after the go moment")
    parser.add_argument("--closed", action="store_true",
                        help="each request due when the previous one ends")
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--go", type=Path)
    options = parser.parse_args()
    arrivals = json.loads(options.schedule.read_text())
    server = Server(options)
    if options.ready:
        options.ready.touch()
    while options.go and not options.go.exists():
        time.sleep(0.01)
    start = time.perf_counter()
    if options.go:  # the go file holds the wall-clock moment the schedule starts from
        start += max(0.0, float(options.go.read_text()) - time.time())
    served = []
    for index, arrival in enumerate(arrivals):
        due = time.perf_counter() if options.closed else start + arrival
        time.sleep(max(0.0, due - time.perf_counter()))
        request = server.serve(index, due)
        request["arrival_s"] = due - start
        request["end_s"] -= start
        served.append(request)
    print(json.dumps({"startup_s": server.startup_s, "weights_bytes": server.weights_bytes,
                      "pool_bytes": server.pool_bytes, "layers": server.config.num_hidden_layers,
                      "requests": served}))


if __name__ == "__main__":
    main()
