"""Step 4: export the trained model in the released DeepSeek-V4.1 checkpoint layout.

The model dir gets config.json (HF: text_config + quantization_config), inference/config.json (the
flat reference form), model.safetensors (FP8 e4m3 + ue8m0 32x32 scales, packed FP4 experts with
per-32 ue8m0 scales, FP8 Engram rows with per-row-per-32 scales, bf16 norms / embeddings / head,
fp32 mHC / sinks / router biases; DSpark stages under mtp.0..2), tokenizer.json and
tokenizer_config.json. The FP8/FP4 codes are those the training forward's fake-quant computed.
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

import quant as Q

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "golden"))
import make_tiny_models  # noqa: E402  (the HF config layout, shared with the golden models)


def fp8(t, name, w):
    codes, scale = Q.fp8_weight(w)
    t[name + ".weight"] = codes.to(torch.float8_e4m3fn)
    t[name + ".scale"] = scale.to(torch.float8_e8m0fnu)


def fp4(t, name, w):
    codes, scale = Q.fp4_weight(w)
    t[name + ".weight"] = (codes[..., 0::2] | (codes[..., 1::2] << 4)).view(torch.int8).contiguous()
    t[name + ".scale"] = scale.to(torch.float8_e8m0fnu)


def bf16(t, name, w):
    t[name] = w.detach().to(torch.bfloat16).contiguous()


def f32(t, name, w):
    t[name] = w.detach().float().contiguous()


def export_block(t, p, block, cfg, layer_id):
    """One Block (backbone layer or DSpark stage) under prefix p."""
    bf16(t, p + "attn_norm.weight", block.attn_norm.weight)
    bf16(t, p + "ffn_norm.weight", block.ffn_norm.weight)
    for site, hs in (("attn", block.hc_attn), ("ffn", block.hc_ffn)):
        f32(t, p + f"hc_{site}_fn", hs.fn)
        f32(t, p + f"hc_{site}_base", hs.base)
        f32(t, p + f"hc_{site}_scale", hs.scale)
    a, at = p + "attn.", block.attn
    fp8(t, a + "wq_a", at.wq_a.weight)
    bf16(t, a + "q_norm.weight", at.q_norm.weight)
    fp8(t, a + "wq_b", at.wq_b.weight)
    fp8(t, a + "wkv", at.wkv.weight)
    bf16(t, a + "kv_norm.weight", at.kv_norm.weight)
    fp8(t, a + "wo_a", at.wo_a)
    fp8(t, a + "wo_b", at.wo_b.weight)
    f32(t, a + "attn_sink", at.attn_sink)
    if at.compressor is not None:
        bf16(t, a + "compressor.wkv.weight", at.compressor.wkv.weight)
        if at.compressor.ratio > 1:
            bf16(t, a + "compressor.wgate.weight", at.compressor.wgate.weight)
        bf16(t, a + "compressor.norm.weight", at.compressor.norm.weight)
    if at.indexer is not None:
        ix = at.indexer
        if ix.owns_k:
            bf16(t, a + "indexer.wk.weight", ix.wk.weight)
            bf16(t, a + "indexer.k_norm.weight", ix.k_norm.weight)
        fp8(t, a + "indexer.wq_b", ix.wq_b.weight)
        bf16(t, a + "indexer.weights_proj.weight", ix.weights_proj.weight)
    if block.engram is not None:
        en = block.engram
        codes, scale = Q.fp8_rows(en.embed)
        t[p + "engram.embed.weight"] = codes.to(torch.float8_e4m3fn)
        t[p + "engram.embed.scale"] = scale.to(torch.float8_e8m0fnu)
        fp8(t, p + "engram.wkv", en.wkv.weight)
        bf16(t, p + "engram.q_weight", en.q_weight)
        bf16(t, p + "engram.k_weight", en.k_weight)
    f, moe = p + "ffn.", block.ffn
    bf16(t, f + "gate.weight", moe.gate)
    f32(t, f + "gate.bias", moe.bias)
    for e, ex in enumerate(moe.experts):
        for w in ("w1", "w2", "w3"):
            fp4(t, f + f"experts.{e}.{w}", getattr(ex, w).weight)
    for w in ("w1", "w2", "w3"):
        fp8(t, f + f"shared_experts.{w}", getattr(moe.shared, w).weight)


def backbone_tensors(model, cfg):
    t = {}
    bf16(t, "embed.weight", model.embed)
    bf16(t, "norm.weight", model.norm.weight)
    bf16(t, "head.weight", model.head)
    for i, block in enumerate(model.layers):
        export_block(t, f"layers.{i}.", block, cfg, i)
    return t


def dspark_tensors(draft, cfg):
    """mtp.0..2: each a ratio-0 block with its own MoE; mtp.0 has main_proj / main_norm, the last
    stage norm, markov_head and confidence_head. The stages tie to the backbone's embed and head."""
    t = {}
    for k, stage in enumerate(draft.stages):
        export_block(t, f"mtp.{k}.", stage, cfg, cfg["n_layers"] + k)
    fp8(t, "mtp.0.main_proj", draft.main_proj.weight)
    bf16(t, "mtp.0.main_norm.weight", draft.main_norm.weight)
    last = f"mtp.{len(draft.stages) - 1}."
    bf16(t, last + "norm.weight", draft.norm.weight)
    bf16(t, last + "markov_head.embed.weight", draft.markov_embed)
    bf16(t, last + "markov_head.head.weight", draft.markov_head)
    bf16(t, last + "confidence_head.proj.weight", draft.confidence.weight)
    return t


def hf_config(cfg):
    hf = make_tiny_models.hf_config(cfg)
    text = hf["text_config"]
    text.update(max_position_embeddings=4096, pad_token_id=2)
    if cfg.get("n_mtp_layers"):
        text.update(num_nextn_predict_layers=cfg["n_mtp_layers"], dspark_block_size=cfg["dspark_block_size"],
                    dspark_noise_token_id=cfg["dspark_noise_token_id"],
                    dspark_target_layer_ids=cfg["dspark_target_layer_ids"],
                    dspark_markov_rank=cfg["dspark_markov_rank"],
                    dspark_n_routed_experts=cfg["dspark_n_routed_experts"],
                    dspark_num_experts_per_tok=cfg["dspark_n_activated_experts"])
    return hf


def backbone_only_config(cfg):
    """The config of the model without its DSpark head."""
    out = {k: v for k, v in cfg.items() if not k.startswith("dspark_") and k != "n_mtp_layers"}
    out["n_mtp_layers"] = 0
    return out


def write_model_dir(out, cfg, tensors, tokenizer_dir):
    out = Path(out)
    (out / "inference").mkdir(parents=True, exist_ok=True)
    flat = dict(cfg)
    flat["compress_ratios"] = list(cfg["compress_ratios"])[: cfg["n_layers"] + cfg.get("n_mtp_layers", 0)]
    (out / "config.json").write_text(json.dumps(hf_config(flat), indent=1) + "\n")
    (out / "inference" / "config.json").write_text(json.dumps(flat, indent=1) + "\n")
    save_file({n: tensors[n] for n in sorted(tensors)}, str(out / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(Path(tokenizer_dir) / name, out / name)


def main():
    import dspark
    import train

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=REPO / "build" / "train")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-dspark", action="store_true", help="export the backbone only")
    args = ap.parse_args()
    model, cfg, _ = train.build(args.work)
    model.load_state_dict(torch.load(args.work / train.TUNED_CHECKPOINT)["model"])
    tensors = backbone_tensors(model, cfg)
    if args.no_dspark:
        cfg = backbone_only_config(cfg)
    else:
        draft = dspark.build(cfg)
        draft.load_state_dict(torch.load(args.work / "dspark.pt")["model"])
        tensors.update(dspark_tensors(draft, cfg))
    write_model_dir(args.out, cfg, tensors, args.work / "tokenizer")
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"wrote {args.out}: {len(tensors)} tensors, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
