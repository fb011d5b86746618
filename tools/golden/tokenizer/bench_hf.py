#!/usr/bin/env python3
"""Measures HF `tokenizers` encode throughput on the test corpus, single-threaded, for
comparison with bench/tokenizer_bench.cc. Each file is encoded as one string, like the C++
benchmark; the best of several rounds is reported.

Usage: /root/gv/bin/python tools/golden/tokenizer/bench_hf.py [rounds]
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


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
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
    print(f"{'corpus':24s} {total_bytes / 1e6 / best_total:8.2f} MB/s ({total_bytes} bytes)")


if __name__ == "__main__":
    main()
