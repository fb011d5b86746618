#!/usr/bin/env python3
"""A tiny random DeepSeek-V4.1 checkpoint with three DSpark stages (mtp.0..2), plus draft goldens
from the official reference's forward_spec.

Run by hand (never in CI), with the same reference package as make_tiny_models.py:

  python tools/golden/make_draft_golden.py --reference DIR [--out tests/data/models]

The backbone is built like the tiny-* cases (make_tiny_models.py: released storage formats, an
embedding-dominated stream). The reference runs as published with the same two run-time choices
(fp32 indexer scores; every backbone row from one full-sequence prefill, never from the quirky
decode path). The draft then runs as the reference's __main__ does: forward_spec at start_pos 0
seeds the stage windows with the prompt's taps, and each decode call forward_spec(next token,
main_hidden of p, p) writes slot p and drafts the block at p + 1 .. p + 5, greedy.

golden/ gets:
  tokens.json     the tokens (prompt + greedy continuation), the seed length, per decode step the
                  draft tokens and the confidence logits, the fp64 noise envelope, torch version;
  logits.npy      the backbone's fp32 logits of every position (as the other tiny cases);
  taps.npy        main_hidden of every position [positions, 3 * dim] (bf16 values as fp32);
  draft_logits.npy  every decode step's draft logits, [steps * 5, vocab] fp32, Markov bias included.
"""

import argparse
import json
import math
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_models as tiny  # noqa: E402

NAME = "tiny-d"
CASE = dict(
    vocab_size=512, dim=64, moe_inter_dim=64, n_layers=4, n_heads=4, head_dim=64, rope_head_dim=16,
    q_lora_rank=64, o_groups=2, o_lora_rank=32, window_size=16,
    n_routed_experts=8, n_activated_experts=2,
    compress_ratios=[0, 2, 1, 0, 0, 0, 0], kv_source_layers=[1, 2], index_source_layers=[1, 2],
    candidate_source_layer=-1, candidate_topk_blocks=0, candidate_block_size=0,
    index_n_heads=16, index_head_dim=32, index_topk=16,
    engram_layer_ids=[1], engram_max_ngram_size=3, engram_n_heads=2, engram_head_dim=32,
    engram_vocab_size=800, original_seq_len=0,
    prompt_len=60, seed=4, shards=1,
)
DSPARK = dict(
    n_mtp_layers=3, dspark_block_size=5, dspark_noise_token_id=509, dspark_target_layer_ids=[1, 2, 3],
    dspark_markov_rank=32, dspark_n_routed_experts=4, dspark_n_activated_experts=3,
)
DRAFT_STEPS = 36


def flat_config():
    tiny.CONFIGS[NAME] = CASE
    flat = tiny.flat_config(NAME)
    flat.update(DSPARK)
    return flat


def hf_config(flat):
    hf = tiny.hf_config(flat)
    text = hf["text_config"]
    text["num_nextn_predict_layers"] = flat["n_mtp_layers"]
    for key in ("dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids", "dspark_markov_rank",
                "dspark_n_routed_experts"):
        text[key] = flat[key]
    text["dspark_num_experts_per_tok"] = flat["dspark_n_activated_experts"]
    return hf


def add_draft_weights(t, cfg, factory, kernel):
    """The mtp.* stages: window-only blocks with their own MoE, main_proj/main_norm on stage 0,
    norm / Markov head / confidence head on the last."""
    w = tiny.TensorWriter(t, factory, kernel)
    d, rank = cfg["dim"], cfg["dspark_markov_rank"]
    taps = len(cfg["dspark_target_layer_ids"])
    for k in range(cfg["n_mtp_layers"]):
        p = f"mtp.{k}."
        if k == 0:
            w.fp8(p + "main_proj", d, taps * d, 1.0 / math.sqrt(taps * d))
            w.bf16(p + "main_norm.weight", d, std=0.1, mean=1.0)
        # A larger output gain than the backbone's: the draft's only signal about the context is
        # its attention, which must show in the logits for the golden to test it.
        tiny.block_weights(w, p, cfg, cfg["dspark_n_routed_experts"], wo_b_gain=2.0)
        if k == cfg["n_mtp_layers"] - 1:
            w.bf16(p + "norm.weight", d, std=0.1, mean=1.0)
            w.bf16(p + "markov_head.embed.weight", cfg["vocab_size"], rank, std=1.0)
            w.bf16(p + "markov_head.head.weight", cfg["vocab_size"], rank, std=0.3 / math.sqrt(rank))
            w.bf16(p + "confidence_head.proj.weight", 1, d + rank, std=1.0 / math.sqrt(d + rank))


class ForcedDraftTokens:
    """Makes forward_head pick the given tokens instead of its argmax, so that a variant run's
    slot k + 1 sees the same Markov input as the golden's (a near tie at slot k would otherwise
    change everything after it)."""

    def __init__(self, ref, tokens):
        self.ref, self.tokens, self.saved = ref, list(tokens), None

    def __enter__(self):
        self.saved = self.ref.sample
        picks = iter(self.tokens)
        self.ref.sample = lambda logits, temperature=1.0: torch.tensor([next(picks)])
        return self

    def __exit__(self, *exc):
        self.ref.sample = self.saved


def run_reference(ref, m, tokens, seed_len, forced=None):
    """Backbone logits and taps of every position (one full prefill), then the draft: seed with
    the first seed_len taps, one forward_spec per decode position p = seed_len .. len - 2
    (with `forced`, each step's draft picks are those of the same step there)."""
    with tiny.Fp32IndexerScores(ref, m):
        _, logits, main_hidden = m.forward(torch.tensor([tokens]), 0)
    m.forward_spec(torch.tensor([tokens[seed_len]]), main_hidden[:, :seed_len], 0)
    steps = []
    for p in range(seed_len, seed_len + DRAFT_STEPS):
        with ForcedDraftTokens(ref, forced[p - seed_len] if forced else []) if forced else nullcontext():
            out, draft_logits, confidence = m.forward_spec(torch.tensor([tokens[p + 1]]), main_hidden[:, p:p + 1], p)
        steps.append((out[0, 1:].tolist(), draft_logits[0].float(), confidence[0].float()))
    return logits[0].float(), main_hidden[0].float(), steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, type=Path, help="folder holding the deepseek_v41 package")
    parser.add_argument("--out", type=Path, default=tiny.REPO / "tests" / "data" / "models")
    args = parser.parse_args()
    ref, kernel = tiny.load_reference(args.reference)
    torch.manual_seed(0)
    flat = flat_config()
    out_dir = args.out / NAME
    (out_dir / "inference").mkdir(parents=True, exist_ok=True)
    (out_dir / "golden").mkdir(exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(hf_config(flat), indent=1) + "\n")
    (out_dir / "inference" / "config.json").write_text(json.dumps(flat, indent=1) + "\n")
    import shutil

    shutil.copyfile(tiny.TOKENIZER, out_dir / "tokenizer.json")

    torch.set_default_dtype(torch.float32)
    factory = tiny.WeightFactory(CASE["seed"])
    tensors = tiny.make_weights(flat, factory, kernel)
    add_draft_weights(tensors, flat, factory, kernel)
    for old in out_dir.glob("model*.safetensors*"):
        old.unlink()
    tiny.save_checkpoint(tensors, out_dir, CASE["shards"])
    m = tiny.build_reference_model(ref, flat, tensors)

    rng = np.random.default_rng(CASE["seed"] * 1000)
    tokens = [0] + rng.integers(3, flat["vocab_size"], CASE["prompt_len"] - 1).tolist()
    seed_len = len(tokens)
    for _ in range(DRAFT_STEPS + 1):  # greedy continuation, each step a fresh full prefill
        tokens.append(int(tiny.reference_logits(ref, m, tokens)[-1].argmax()))
    logits, taps, steps = run_reference(ref, m, tokens, seed_len)
    with tiny.Fp64Accumulation(kernel):
        logits64, taps64, steps64 = run_reference(ref, m, tokens, seed_len, forced=[s[0] for s in steps])
    draft = torch.cat([s[1] for s in steps]).numpy().astype(np.float32)
    draft64 = torch.cat([s[1] for s in steps64]).numpy()
    cos = tiny.row_cosines(draft, draft64)
    backbone_cos = tiny.row_cosines(logits.numpy(), logits64.numpy())
    # What the golden can see: the same draft with the stage windows holding only the current
    # slot (no seeding).
    saved = [layer.attn.window_kv_cache.clone() for layer in m.mtp]
    unseeded = []
    for k, p in enumerate(range(seed_len, seed_len + DRAFT_STEPS)):
        for layer in m.mtp:
            layer.attn.window_kv_cache.zero_()
        with ForcedDraftTokens(ref, steps[k][0]):
            unseeded.append(m.forward_spec(torch.tensor([tokens[p + 1]]), taps[None, p:p + 1].to(torch.bfloat16), p)[1][0])
    for layer, cache in zip(m.mtp, saved):
        layer.attn.window_kv_cache.copy_(cache)
    unseeded_cos = tiny.row_cosines(draft, torch.cat(unseeded).float().numpy())
    np.save(out_dir / "golden" / "logits.npy", logits.numpy().astype(np.float32))
    np.save(out_dir / "golden" / "taps.npy", taps.numpy().astype(np.float32))
    np.save(out_dir / "golden" / "draft_logits.npy", draft)
    meta = dict(
        tokens=tokens, prompt_len=seed_len, seed_len=seed_len, draft_steps=DRAFT_STEPS,
        draft_tokens=[s[0] for s in steps], draft_confidence=[s[2].tolist() for s in steps],
        reference_fp64_envelope=dict(mean_cosine=float(backbone_cos.mean()), min_cosine=float(backbone_cos.min())),
        draft_fp64_envelope=dict(mean_cosine=float(cos.mean()), min_cosine=float(cos.min()),
                                 argmax_equal=float((draft.argmax(-1) == draft64.argmax(-1)).mean())),
        unseeded_draft=dict(mean_cosine=float(unseeded_cos.mean()), min_cosine=float(unseeded_cos.min())),
        logit_std=float(logits.std()), draft_logit_std=float(draft.std()),
        draft_min_margin=float(tiny.top2_margins(draft).min()),
        torch=torch.__version__, numpy=np.__version__,
    )
    (out_dir / "golden" / "tokens.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{NAME}: {len(tokens)} positions, {DRAFT_STEPS} draft steps; backbone envelope min "
          f"{backbone_cos.min():.7f}; draft envelope mean {cos.mean():.7f} min {cos.min():.7f}; "
          f"draft logit std {draft.std():.3f}, min margin {meta['draft_min_margin']:.4f}; unseeded cos mean "
          f"{unseeded_cos.mean():.5f} min {unseeded_cos.min():.5f}")


if __name__ == "__main__":
    main()
