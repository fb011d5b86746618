#!/usr/bin/env python3
"""Golden logits of the official reference for a trained model directory (the embedded default).

Run by hand (never in CI), with the reference package as for make_tiny_models.py:

  python tools/golden/make_trained_golden.py --reference DIR --model data/models/kjv-tiny \
      --out tests/data/models/kjv-tiny/golden

The reference loads the exported checkpoint exactly as released (model.safetensors, the flat
inference/config.json, tokenizer.json for the Engram map), with the run-time choices of
make_tiny_models.py (fp32 indexer scores, every row from a full-sequence prefill). The prompt is
a held-out text prompt plus a chat prompt, tokenized with the model's own tokenizer; it is kept
only where the reference agrees with its fp64-accumulated self (golden-testing-notes.md), then
extended by greedy decoding.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

import make_tiny_models as tiny

# Held-out text (Revelation is never trained on), then a chat turn of the V4.1 format.
PROMPTS = [
    "Revelation 21\nAnd I saw a new heaven and a new earth: for the first heaven and the first earth were passed away;"
    " and there was no more sea.\nAnd I John saw the holy city, new Jerusalem, coming down from God out of heaven,",
    "Revelation 4\nAfter this I looked, and, behold, a door was opened in heaven: and the first voice which I heard "
    "was as it were of a trumpet talking with me; which said, Come up hither,",
]
CHAT = "<｜begin▁of▁sentence｜><｜User｜>Which book comes after Ruth?<｜Assistant｜></think>"
GENERATED_TOKENS = 32
MAX_SEQ_LEN = 512


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", required=True, type=Path)
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    ref, kernel = tiny.load_reference(args.reference)
    flat = json.loads((args.model / "inference" / "config.json").read_text())
    tensors = load_file(str(args.model / "model.safetensors"))
    m = tiny.build_reference_model(ref, flat, tensors, tokenizer_path=args.model / "tokenizer.json",
                                   max_seq_len=MAX_SEQ_LEN)
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    for attempt, text in enumerate(PROMPTS):
        tokens = [bos] + tok.encode(text, add_special_tokens=False).ids + tok.encode(CHAT, add_special_tokens=False).ids
        mean, low, _ = tiny.envelope(ref, kernel, m, tokens)
        print(f"prompt {attempt}: {len(tokens)} tokens, fp64 envelope mean {mean:.7f} min {low:.7f}")
        if low >= tiny.ENVELOPE_MIN_COSINE:
            break
    else:
        raise SystemExit("no prompt within the reference's noise envelope")
    prompt_len = len(tokens)
    for _ in range(GENERATED_TOKENS):
        tokens.append(int(tiny.reference_logits(ref, m, tokens)[-1].argmax()))
    envelope_mean, envelope_min, logits = tiny.envelope(ref, kernel, m, tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "logits.npy", logits)
    top2 = np.sort(logits, axis=-1)[:, -2:]
    meta = dict(tokens=tokens, prompt_len=prompt_len, generated=GENERATED_TOKENS, prompt_attempt=attempt,
                reference_fp64_envelope=dict(mean_cosine=envelope_mean, min_cosine=envelope_min),
                logit_std=float(logits.std()), min_margin=float((top2[:, 1] - top2[:, 0]).min()),
                torch=torch.__version__, torch_cpu_capability=torch.backends.cpu.get_cpu_capability(),
                numpy=np.__version__, text=tok.decode(tokens, skip_special_tokens=False))
    (args.out / "tokens.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(tokens)} positions, logit std {meta['logit_std']:.3f}, min margin {meta['min_margin']:.4f}, "
          f"envelope mean {envelope_mean:.7f} min {envelope_min:.7f}")


if __name__ == "__main__":
    main()
