#!/usr/bin/env python3
"""Writes tests/data/core/numpy_random_values.json: NumPy's own outputs for the C++ port in
src/core/numpy_random.{h,cc}.

  * "multipliers": the DeepSeek-V4.1 Engram hash multipliers, computed exactly as the reference
    does, for layer ids 0..64 at several compressed vocab sizes and max_ngram_size 4 and 3.
  * "integers": raw np.random.default_rng(seed).integers(low, high, size=(count,), dtype=np.int64)
    draws covering every sampler path: a single value, tiny and 32-bit ranges (32-bit halves),
    exactly 2**32 values, powers of two, wide 64-bit ranges and bounds at the int64 limits.

Usage: /root/gv/bin/python tools/golden/numpy_random_values.py [output.json]
"""

import json
import pathlib
import sys

import numpy as np

INT64_MAX = int(np.iinfo(np.int64).max)
INT64_MIN = int(np.iinfo(np.int64).min)

LAYER_IDS = range(0, 65)
VOCAB_SIZES = [99092, 1000, 2**20 + 7, 2**40, INT64_MAX // 10, 2**62, INT64_MAX]
NGRAM_SIZES = [4, 3]

SEEDS = [0, 1, 42, 10007, 14 * 10007, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 1234567890123456789]
RANGES = [
    (0, 1),
    (0, 2),
    (0, 3),
    (-1, 2),
    (0, 7),
    (0, 256),
    (-1000, 1000),
    (0, 2**31),
    (0, 2**31 + 1),  # Lemire rejects about half of the 32-bit draws
    (0, 2**32 - 1),
    (0, 2**32),
    (5, 2**32 + 6),
    (0, 2**40),
    (0, 2**62),
    (0, (INT64_MAX // 99092) // 2),
    (0, INT64_MAX),
    (INT64_MAX - 3, INT64_MAX),
    (INT64_MIN, INT64_MIN + 5),
    (INT64_MIN, INT64_MAX),
    (INT64_MIN, 1),  # 2**63 + 1 values: Lemire rejects about half of the 64-bit draws
]
COUNT = 9  # odd: 32-bit ranges end with half of a 64-bit output left in the buffer


def engram_multipliers(layer_id, max_ngram_size, compressed_vocab_size):
    # Verbatim from the reference model code.
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab_size) // 2)
    g = np.random.default_rng(10007 * layer_id)
    values = g.integers(low=0, high=bound, size=(max_ngram_size,), dtype=np.int64)
    multipliers = values * 2 + 1
    return [int(v) for v in multipliers]


def main():
    root = pathlib.Path(__file__).resolve().parents[2]
    out_path = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else root / "tests/data/core/numpy_random_values.json"

    multipliers = []
    for vocab in VOCAB_SIZES:
        for ngram in NGRAM_SIZES:
            multipliers.append({
                "compressed_vocab_size": vocab,
                "max_ngram_size": ngram,
                "by_layer": [engram_multipliers(layer, ngram, vocab) for layer in LAYER_IDS],
            })

    integers = []
    for seed in SEEDS:
        for low, high in RANGES:
            values = np.random.default_rng(seed).integers(low, high, size=(COUNT,), dtype=np.int64)
            integers.append({"seed": seed, "low": low, "high": high, "values": [int(v) for v in values]})

    # One case per line keeps the committed file small and diffable.
    lines = ["{"]
    lines.append(f'  "numpy_version": {json.dumps(np.__version__)},')
    lines.append(f'  "generator": "np.random.default_rng(seed).integers(low, high, size=(n,), dtype=np.int64)",')
    lines.append('  "multipliers": [')
    lines.append(",\n".join("    " + json.dumps(m, separators=(",", ":")) for m in multipliers))
    lines.append("  ],")
    lines.append('  "integers": [')
    lines.append(",\n".join("    " + json.dumps(c, separators=(",", ":")) for c in integers))
    lines.append("  ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # self-check
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(text)
    print(f"wrote {out_path} (numpy {np.__version__}, {len(multipliers)} multiplier sets, "
          f"{len(integers)} integer cases)")


if __name__ == "__main__":
    main()
