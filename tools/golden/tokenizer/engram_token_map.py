#!/usr/bin/env python3
"""Writes the reference Engram compressed-token map for the project's default tokenizer.

Runs the construction of the DeepSeek-V4.1 reference `engram.py` with HF `tokenizers` and
stores it compactly: compressed ids are handed out in token-id order, so a token whose key is
new gets the next id and only tokens that reuse an earlier key need storing. The output is a
flat array of little-endian int32 pairs (token_id, compressed_id) for exactly those tokens,
in increasing token_id order.

Usage: /root/gv/bin/python tools/golden/tokenizer/engram_token_map.py
"""
import pathlib

import numpy as np
from tokenizers import Regex, Tokenizer, normalizers

REPO = pathlib.Path(__file__).resolve().parents[3]
TOKENIZER = REPO / "data/tokenizer/tokenizer.json"
OUTPUT = REPO / "tests/data/tokenizer/engram_token_map_repeats.bin"


def build_lookup(backend):
    normalizer = normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.NFD(),
        normalizers.StripAccents(),
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), "\ue000"),
        normalizers.Strip(),
        normalizers.Replace("\ue000", " "),
    ])
    key_to_new = {}
    lookup = np.empty(backend.get_vocab_size(with_added_tokens=True), dtype=np.int64)
    for token_id in range(len(lookup)):
        text = backend.decode([token_id], skip_special_tokens=False)
        if "\ufffd" in text:
            key = backend.id_to_token(token_id)
        else:
            normalized = normalizer.normalize_str(text)
            key = normalized if normalized else text
        lookup[token_id] = key_to_new.setdefault(key, len(key_to_new))
    return lookup, len(key_to_new)


def main():
    lookup, size = build_lookup(Tokenizer.from_file(str(TOKENIZER)))
    repeats = []
    next_new = 0
    for token_id, compressed in enumerate(lookup):
        if compressed == next_new:
            next_new += 1
        else:
            repeats.append((token_id, compressed))
    assert next_new == size
    np.asarray(repeats, dtype="<i4").reshape(-1).tofile(OUTPUT)
    print(f"tokens {len(lookup)}, compressed vocab {size}, repeats {len(repeats)} -> {OUTPUT}")


if __name__ == "__main__":
    main()
