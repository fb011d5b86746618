#!/usr/bin/env python3
"""The DSpark acceptance of a trained model directory as the official reference measures it, on
the model's own held-out prompts, for the engine's test to compare with (tests/model/
draft_test.cc, DraftAcceptanceMatchesTheReference).

Run by hand (never in CI), with the reference package as for make_tiny_models.py:

  python tools/golden/draft_acceptance.py --reference DIR [--model tests/data/models/kjv-tiny]

The protocol is tools/train/evaluate.py's (the number in the README's default-model table): greedy
decode with the reference, prefill then one token a step; at every step forward_spec proposes 5
tokens from the taps of that step, and the accepted length is the longest prefix equal to the
target's own next greedy tokens, plus the bonus token. Here the prompts are the model directory's
eval/text_prompts.json (BOS first), and the greedy continuations are stored too, so the engine can
be measured on exactly these trajectories.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_models as tiny  # noqa: E402

GENERATED = 64


def reference_acceptance(m, prompts, generated):
    """(accepted tokens, steps, cases): every prompt decoded greedily by the reference for
    `generated` tokens, each step's 5 proposals scored against the target's own continuation."""
    cases, accepted, steps = [], 0, 0
    for prompt in prompts:
        tokens = list(prompt)
        with torch.inference_mode():
            next_ids, _, hidden = m.forward(torch.tensor([tokens]), 0)
            next_ids = next_ids[:, -1]
            m.forward_spec(next_ids, hidden, 0)
            pos, proposals = len(tokens), []
            tokens.append(int(next_ids[0]))
            for _ in range(generated):
                # the target reads the token at `pos` and produces the one at pos + 1; the draft,
                # given that token and the taps of `pos`, guesses the tokens at pos + 2 .. pos + 6
                ids, _, hidden = m.forward(torch.tensor([[tokens[-1]]]), pos)
                ids = ids[:, -1]
                tokens.append(int(ids[0]))
                draft, _, _ = m.forward_spec(ids, hidden, pos)
                proposals.append((pos + 1, draft[0, 1:].tolist()))
                pos += 1
        for at, draft in proposals:
            # draft[k] guesses the token at at + 1 + k; the target's greedy tokens are known
            k = 0
            while k < len(draft) and at + 1 + k < len(tokens) and draft[k] == tokens[at + 1 + k]:
                k += 1
            if at + 1 + len(draft) <= len(tokens):
                accepted, steps = accepted + k + 1, steps + 1
        cases.append(dict(tokens=tokens, prompt_len=len(prompt)))
    return accepted, steps, cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, type=Path, help="folder holding the deepseek_v41 package")
    parser.add_argument("--model", type=Path, default=tiny.REPO / "tests" / "data" / "models" / "kjv-tiny")
    args = parser.parse_args()
    ref, _ = tiny.load_reference(args.reference)
    flat = json.loads((args.model / "inference" / "config.json").read_text())
    m = tiny.build_reference_model(ref, flat, load_file(str(args.model / "model.safetensors")),
                                   tokenizer_path=args.model / "tokenizer.json", max_seq_len=1024)
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    texts = json.loads((args.model / "eval" / "text_prompts.json").read_text())
    prompts = [[bos] + tok.encode(text, add_special_tokens=False).ids for text in texts]
    accepted, steps, cases = reference_acceptance(m, prompts, GENERATED)
    out = dict(mean_accepted=accepted / steps, steps=steps, generated=GENERATED, block=5, cases=cases,
               protocol="tools/train/evaluate.py dspark_acceptance on eval/text_prompts.json",
               torch=torch.__version__)
    (args.model / "golden" / "draft_acceptance.json").write_text(json.dumps(out) + "\n")
    print(f"mean accepted length per step (bonus included): {accepted / steps:.4f} over {steps} steps, "
          f"{len(texts)} prompts")


if __name__ == "__main__":
    main()
