#!/usr/bin/env python3
"""Writes HF `tokenizers` ids for every corpus file as tests/data/tokenizer/corpus/<name>.ids
(little-endian int32). Files that are not valid UTF-8 are encoded after
`bytes.decode("utf-8", "replace")`, the repair our Tokenizer::Encode documents.

Usage: /root/gv/bin/python tools/golden/tokenizer/encode_golden.py
"""
import pathlib

import numpy as np
from tokenizers import Tokenizer

REPO = pathlib.Path(__file__).resolve().parents[3]
TOKENIZER = REPO / "data/tokenizer/tokenizer.json"
CORPUS = REPO / "tests/data/tokenizer/corpus"


def main():
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    total = 0
    for path in sorted(CORPUS.iterdir()):
        if path.suffix == ".ids":
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        ids = np.asarray(tokenizer.encode(text, add_special_tokens=False).ids, dtype="<i4")
        ids.tofile(path.with_name(path.name + ".ids"))
        total += ids.nbytes
        print(f"{path.name}: {len(ids)} ids")
    print(f"total {total} bytes of ids")


if __name__ == "__main__":
    main()
