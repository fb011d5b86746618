"""Step 5: what the trained model is worth, measured.

  perplexity   Revelation (never trained on) under the fp32 master model, the QAT training model,
               the exported FP8/FP4 checkpoint in the engine (`deepinfer perplexity`) and a unigram
               baseline, over the same windows (context 512, stride 256).
  dspark       the mean accepted length per step (bonus token included) of the DSpark head, measured
               with the official reference's own decode loop and `forward_spec` on held-out greedy
               generations.
"""

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import quant
import train

REPO = Path(__file__).resolve().parents[2]
CONTEXT, STRIDE = 512, 256


def windows(n):
    """(begin, end, first scored) text-token windows, as `deepinfer perplexity` makes them."""
    out, begin, scored = [], 0, 0
    while scored < n:
        end = min(n, begin + CONTEXT - 1)
        out.append((begin, end, scored))
        scored, begin = end, begin + STRIDE
    return out


@torch.no_grad()
def model_nll(model, ids, bos):
    total = 0.0
    for begin, end, first in windows(len(ids)):
        x = torch.tensor([[bos] + ids[begin:end]])
        logits, _, _ = model(x)
        logp = torch.log_softmax(logits[0, :-1], -1)
        rows = torch.arange(first - begin, end - begin)
        total -= float(logp[rows, torch.tensor(ids[first:end])].sum())
    return total


def perplexity(args):
    torch.set_num_threads(args.threads)
    model, cfg, tok = train.build(args.work)
    model.load_state_dict(torch.load(args.work / train.TUNED_CHECKPOINT)["model"])
    text = (args.work / "revelation.txt").read_text()
    ids = tok.encode(text, add_special_tokens=False).ids
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    n, nbytes = len(ids), len(text.encode())
    rows = {}
    for name, quantize in (("fp32 master weights, no fake-quant", False), ("QAT training model (fake-quant)", True)):
        with quant.Precision(quantize):
            nll = model_nll(model, ids, bos)
        rows[name] = nll
    # Unigram baseline: token frequencies of the training text, add-one smoothed.
    counts = torch.bincount(torch.load(args.work / "data.pt")["text"].long(), minlength=cfg["vocab_size"]).double() + 1
    logp = torch.log(counts / counts.sum())
    rows["unigram baseline (training-text frequencies)"] = -float(logp[torch.tensor(ids)].sum())
    engine = subprocess.run([args.deepinfer, "perplexity", "--model", str(args.model), "--file", str(args.work / "revelation.txt"),
                             "--context", str(CONTEXT), "--stride", str(STRIDE)], capture_output=True, text=True, check=True)
    m = re.search(r"perplexity ([0-9.]+)\s+bits/byte ([0-9.]+)", engine.stdout)
    result = {}
    for name, nll in rows.items():
        result[name] = dict(perplexity=math.exp(nll / n), bits_per_byte=nll / math.log(2) / nbytes)
    result["exported FP8/FP4 checkpoint in the engine"] = dict(perplexity=float(m.group(1)), bits_per_byte=float(m.group(2)))
    fp32 = result["fp32 master weights, no fake-quant"]["perplexity"]
    for name, r in result.items():
        print(f"{name:48s} perplexity {r['perplexity']:9.3f}  bits/byte {r['bits_per_byte']:.4f}  "
              f"vs fp32 {100 * (r['perplexity'] / fp32 - 1):+.2f}%")
    print(f"Revelation: {nbytes} bytes, {n} tokens, windows of {CONTEXT} with stride {STRIDE}")
    (args.work / "perplexity.json").write_text(json.dumps(result, indent=1) + "\n")


def dspark_acceptance(args):
    """Greedy decode with the reference (prefill, then one token a step); at each step the draft
    proposes 5 tokens from forward_spec, and the accepted length is the longest prefix equal to the
    target's own next greedy tokens, plus the bonus token."""
    sys.path.insert(0, str(REPO / "tools" / "golden"))
    import make_tiny_models as tiny
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    torch.set_num_threads(args.threads)
    ref, _ = tiny.load_reference(args.reference)
    flat = json.loads((args.model / "inference" / "config.json").read_text())
    m = tiny.build_reference_model(ref, flat, load_file(str(args.model / "model.safetensors")),
                                   tokenizer_path=args.model / "tokenizer.json", max_seq_len=1024)
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    chats = [json.loads(line) for line in open(args.work / "chats_held_out.jsonl")]
    text = (args.work / "revelation.txt").read_text().split("\n")
    prompts = [tok.encode("\n".join(text[i:i + 3]), add_special_tokens=False).ids for i in range(1, 400, 40)]
    import prepare

    for chat in chats[: args.chats]:
        upto = next(i for i, msg in enumerate(chat["messages"]) if msg["role"] == "assistant")
        prompts.append(tok.encode(prepare.render(args.deepinfer, chat, upto), add_special_tokens=False).ids)
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    import draft_acceptance  # tools/golden: the protocol, shared with the engine's golden

    prompts = [prompt if prompt[0] == bos else [bos] + prompt for prompt in prompts]
    accepted, steps, _ = draft_acceptance.reference_acceptance(m, prompts, args.tokens)
    print(f"DSpark mean accepted length per step (bonus included): {accepted / steps:.3f} over {steps} steps, "
          f"{len(prompts)} held-out prompts, greedy")
    (args.work / "dspark_acceptance.json").write_text(json.dumps(dict(mean_accepted=accepted / steps, steps=steps,
                                                                      prompts=len(prompts)), indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["perplexity", "dspark"])
    ap.add_argument("--work", type=Path, default=REPO / "build" / "train")
    ap.add_argument("--model", type=Path, required=True, help="the exported model directory")
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "src" / "cli" / "deepinfer"))
    ap.add_argument("--reference", type=Path, help="folder holding the deepseek_v41 package (dspark)")
    ap.add_argument("--tokens", type=int, default=48, help="greedy tokens per prompt (dspark)")
    ap.add_argument("--chats", type=int, default=10, help="held-out chat prompts (dspark)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    perplexity(args) if args.what == "perplexity" else dspark_acceptance(args)


if __name__ == "__main__":
    main()
