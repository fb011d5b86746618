#!/usr/bin/env python3
"""Writes HF `tokenizers` decode results for the project's default tokenizer.

Output tests/data/tokenizer/decode_golden.bin, all integers little-endian:
  uint32 block_size, uint32 token_count,
  uint64 hash per block of `block_size` consecutive ids: FNV-1a 64 over, for each id in the
    block, uint32 len(text) followed by the UTF-8 bytes of decode([id]);
  uint32 record_count, then records: uint8 skip_special_tokens, uint32 n, int32 ids[n],
    uint32 len, UTF-8 bytes of decode(ids, skip_special_tokens).
Records cover every single-byte token, every added token, every id whose text holds U+FFFD,
and random sequences (byte tokens mixed with others, plus ids that name no token).

Usage: /root/gv/bin/python tools/golden/tokenizer/decode_golden.py
"""
import pathlib
import random
import struct

from tokenizers import Tokenizer

REPO = pathlib.Path(__file__).resolve().parents[3]
TOKENIZER = REPO / "data/tokenizer/tokenizer.json"
OUTPUT = REPO / "tests/data/tokenizer/decode_golden.bin"
BLOCK_SIZE = 64


def fnv1a64(data, value=0xCBF29CE484222325):
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def main():
    tok = Tokenizer.from_file(str(TOKENIZER))
    count = tok.get_vocab_size(with_added_tokens=True)
    texts = [tok.decode([i], skip_special_tokens=False).encode("utf-8") for i in range(count)]
    out = bytearray(struct.pack("<II", BLOCK_SIZE, count))
    for start in range(0, count, BLOCK_SIZE):
        value = 0xCBF29CE484222325
        for text in texts[start:start + BLOCK_SIZE]:
            value = fnv1a64(struct.pack("<I", len(text)) + text, value)
        out += struct.pack("<Q", value)

    added = sorted(tok.get_added_tokens_decoder())
    byte_tokens = sorted(i for i in range(count) if len(texts[i]) <= 1 or len(tok.id_to_token(i)) == 1)
    lossy = [i for i in range(count) if "\ufffd".encode() in texts[i]]
    records = [([i], skip) for i in sorted(set(added + byte_tokens + lossy)) for skip in (False, True)]
    rng = random.Random(20240601)
    for _ in range(600):
        ids = [rng.choice(byte_tokens) if rng.random() < 0.5 else rng.randrange(count + 50)
               for _ in range(rng.randint(1, 10))]
        if rng.random() < 0.2:
            ids.insert(rng.randrange(len(ids) + 1), rng.choice(added))
        records.append((ids, rng.random() < 0.5))
    out += struct.pack("<I", len(records))
    for ids, skip in records:
        text = tok.decode(ids, skip_special_tokens=skip).encode("utf-8")
        out += struct.pack(f"<BI{len(ids)}iI", skip, len(ids), *ids, len(text)) + text
    OUTPUT.write_bytes(bytes(out))
    print(f"{count} ids, {len(records)} records, {len(out)} bytes -> {OUTPUT}")


if __name__ == "__main__":
    main()
