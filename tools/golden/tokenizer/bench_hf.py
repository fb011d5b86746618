#!/usr/bin/env python3
"""Measures HF `tokenizers` encode throughput on the test corpus, single-threaded, for
comparison with bench/tokenizer_bench.cc. Each file is encoded as one string, like the C++
benchmark; the best of several rounds is reported.

Usage: python tools/golden/tokenizer/bench_hf.py [rounds] [--ours build/bench/tokenizer_bench]
With --ours, the C++ benchmark runs in the same invocation and the ratio ours/HF is printed.
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import pathlib  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from tokenizers import Tokenizer  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[3]
TOKENIZER = REPO / "data/tokenizer/tokenizer.json"
CORPUS = REPO / "tests/data/tokenizer/corpus"


def ours_mb_per_s(binary):
    """Whole-corpus encode throughput of bench/tokenizer_bench (Google Benchmark JSON)."""
    import json
    import subprocess

    out = subprocess.run([binary, "--benchmark_filter=Encode/corpus$", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b["name"].startswith("Encode/corpus")]
    return max(b["bytes_per_second"] for b in runs) / 1e6


def main():
    args = [a for a in sys.argv[1:]]
    ours_binary = None
    if "--ours" in args:
        ours_binary = args[args.index("--ours") + 1]
        del args[args.index("--ours"):args.index("--ours") + 2]
    rounds = int(args[0]) if args else 5
    texts = {path.name: path.read_bytes().decode("utf-8", "replace")
             for path in sorted(CORPUS.iterdir()) if path.suffix != ".ids"}
    total_bytes = sum(len(text.encode()) for text in texts.values())
    best_total = 0.0
    for name, text in texts.items():
        # A fresh tokenizer per file so its word cache starts cold, like a new C++ Tokenizer.
        tokenizer = Tokenizer.from_file(str(TOKENIZER))
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            tokenizer.encode(text, add_special_tokens=False)
            best = min(best, time.perf_counter() - start)
        size = len(text.encode())
        best_total += best
        print(f"{name:24s} {size / 1e6 / best:8.2f} MB/s")
    hf = total_bytes / 1e6 / best_total
    print(f"{'corpus':24s} {hf:8.2f} MB/s ({total_bytes} bytes)")
    if ours_binary:
        ours = ours_mb_per_s(ours_binary)
        print(f"deepinfer corpus {ours:8.2f} MB/s; ratio deepinfer / HF tokenizers = {ours / hf:.2f}")


if __name__ == "__main__":
    main()
