"""A small inference service: requests one after another, each synchronized, for a fixed time.

usage: infer_loop.py [--layers L] [--channels C] [--batch B] [--size S] [--seconds T]
                     [--ready PATH --go PATH]
A convolution net (L layers of C channels, 3x3, ReLU) in fp16 on a batch of B images S x S.
After a warm-up it creates --ready and waits for --go to exist, so that loops started together
measure the same window, then serves requests for T seconds and prints one JSON line:
requests, rate, median and p99 latency in ms.
"""

import argparse
import json
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--go", type=Path)
    options = parser.parse_args()
    layers = [torch.nn.Conv2d(3, options.channels, 3, padding=1), torch.nn.ReLU()]
    for _ in range(options.layers - 1):
        layers += [torch.nn.Conv2d(options.channels, options.channels, 3, padding=1),
                   torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda().half().eval()
    images = torch.randn(options.batch, 3, options.size, options.size, device="cuda").half()
    with torch.inference_mode():
        for _ in range(20):
            model(images)
        torch.cuda.synchronize()
        if options.ready:
            options.ready.touch()
        while options.go and not options.go.exists():
            time.sleep(0.001)
        latencies = []
        end = time.monotonic() + options.seconds
        while (began := time.monotonic()) < end:
            model(images)
            torch.cuda.synchronize()
            latencies.append(time.monotonic() - began)
    latencies.sort()
    count = len(latencies)
    print(json.dumps({"requests": count, "rate": round(count / options.seconds, 1),
                      "median_ms": round(latencies[count // 2] * 1e3, 3),
                      "p99_ms": round(latencies[min(count - 1, int(count * 0.99))] * 1e3, 3)}))


if __name__ == "__main__":
    main()
