"""Step 3: the DSpark draft head (spec §3.8), trained on the frozen backbone.

At decode position p the draft gets the backbone's taps (the attention inputs of
dspark_target_layer_ids, averaged over the hc copies) and the token t_{p+1} the backbone just
produced. Its block is [t_{p+1}, noise x 4] at positions p+1..p+5; every stage attends over a
window of main_kv (its own projection of the taps, positions p-W+1..p) and, bidirectionally, the
5 block positions. Slot i predicts t_{p+2+i}, with a Markov bias from the token before it.

Training all anchors of a sequence at once is exact: an anchor's window holds only positions <= p
and its block attends only to itself. The draft learns the backbone's own next-token
distributions (a KL to the frozen backbone's logits, which is what the verify step checks
against), with teacher-forced Markov inputs; the confidence head learns, with a logistic loss on
detached features, whether the greedy draft prefix up to each slot survives the greedy verify.
"""

import argparse
import csv
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import model as M
from quant import fp8_act_qdq, round_bf16

REPO = Path(__file__).resolve().parents[2]


class Anchors:
    """What one forward of the stages reads besides the stream: per anchor (b, p), the block
    positions and the stage's window keys."""

    def __init__(self, main_x, anchor_b, anchor_p, window):
        self.main_x = main_x  # [B, S, D] bf16: main_norm(main_proj(taps))
        self.b, self.p, self.window = anchor_b, anchor_p, window
        offsets = torch.arange(window) - (window - 1)
        self.win_pos = anchor_p.unsqueeze(1) + offsets  # [N, W] positions p-W+1..p
        self.win_valid = self.win_pos >= 0
        self.block_pos = anchor_p.unsqueeze(1) + 1 + torch.arange(5)  # [N, 5]


class DSparkAttention(M.Attention):
    """A ratio-0 attention whose keys are [window of main_kv, the block's own 5 entries]."""

    def forward(self, x, anchors):
        n, k, _ = x.shape
        b, s, _ = anchors.main_x.shape
        main_kv = self.kv_norm(self.wkv(anchors.main_x))
        main_kv = fp8_act_qdq(M.rope_tail(main_kv, self.table, torch.arange(s), self.rd), 32)  # [B, S, Dh]
        win = main_kv[anchors.b.unsqueeze(1), anchors.win_pos.clamp_min(0)]  # [N, W, Dh]
        pos = anchors.block_pos
        xq = fp8_act_qdq(x)
        qr = self.q_norm(self.wq_a(x, xq))
        q = M.rope_tail(self.wq_b(qr).unflatten(-1, (self.h, self.dh)), self.table, pos, self.rd)
        kv = fp8_act_qdq(M.rope_tail(self.kv_norm(self.wkv(x, xq)), self.table, pos, self.rd), 32)
        scale = self.dh**-0.5
        logits = torch.cat([torch.einsum("nkhd,nwd->nhkw", q, win), torch.einsum("nkhd,njd->nhkj", q, kv)], -1) * scale
        valid = torch.cat([anchors.win_valid, torch.ones(n, k, dtype=torch.bool)], -1)
        logits = logits.masked_fill(~valid.view(n, 1, 1, -1), -torch.inf)
        sink = self.attn_sink.view(1, -1, 1, 1).expand(n, -1, k, 1)
        probs = torch.softmax(torch.cat([logits, sink], -1), -1)[..., :-1]
        o = torch.einsum("nhkw,nwd->nkhd", probs, torch.cat([win, kv], 1))
        o = M.rope_tail(round_bf16(o), self.table, pos, self.rd, inverse=True)
        wo_a = M.fp8_weight_qdq(self.wo_a).view(self.groups, self.o_rank, -1)
        o = round_bf16(torch.einsum("bsgd,grd->bsgr", o.reshape(n, k, self.groups, -1), wo_a))
        return self.wo_b(o.flatten(2))


class DSpark(nn.Module):
    def __init__(self, cfg, tables):
        super().__init__()
        d, v, r = cfg["dim"], cfg["vocab_size"], cfg["dspark_markov_rank"]
        self.cfg = cfg
        self.main_proj = M.Linear(d * len(cfg["dspark_target_layer_ids"]), d, "fp8")
        self.main_norm = M.RMSNorm(d, cfg["norm_eps"])
        self.stages = nn.ModuleList(
            M.Block(cfg, cfg["n_layers"] + k, tables, n_experts=cfg["dspark_n_routed_experts"],
                    top_k=cfg["dspark_n_activated_experts"], attention=DSparkAttention)
            for k in range(cfg["n_mtp_layers"]))
        self.norm = M.RMSNorm(d, cfg["norm_eps"])
        self.markov_embed = nn.Parameter(torch.randn(v, r) * 0.5)
        self.markov_head = nn.Parameter(torch.zeros(v, r))  # the bias starts at 0: the backbone head alone
        self.confidence = nn.Linear(d + r, 1, bias=False)

    def forward(self, backbone, taps, ids, anchor_b, anchor_p, tokens_in):
        """Draft logits [N, 5, V] (Markov bias included, teacher-forced on tokens_in [N, 5] = the
        tokens before each slot) and the confidence inputs [N, 5, D + R]."""
        cfg = self.cfg
        main_x = self.main_norm(self.main_proj(taps))
        anchors = Anchors(main_x, anchor_b, anchor_p, cfg["window_size"])
        block = torch.full((len(anchor_b), cfg["dspark_block_size"]), cfg["dspark_noise_token_id"], dtype=torch.long)
        block[:, 0] = ids[anchor_b, anchor_p + 1]
        h = round_bf16(F.embedding(block, backbone.embed.detach()))
        h = h.unsqueeze(2).expand(-1, -1, cfg["hc_mult"], -1)
        pre_mix = torch.zeros(h.shape[:3])
        pre_mix[..., 0] = 1.0
        for stage in self.stages:
            h, pre_mix = stage(h, pre_mix, anchors)
        xh = M.hc_pre(h, pre_mix)
        logits = F.linear(self.norm(xh), round_bf16(backbone.head.detach()))
        e = round_bf16(F.embedding(tokens_in, self.markov_embed))
        logits = logits + F.linear(e, round_bf16(self.markov_head))
        return logits, torch.cat([xh, e], -1)

    def confidence_logits(self, features):
        return F.linear(features, round_bf16(self.confidence.weight)).squeeze(-1)

    def moe_layers(self):
        return [s.ffn for s in self.stages]


def build(cfg, max_len=4096):
    tables = {False: M.rope_table(cfg, False, max_len), True: M.rope_table(cfg, True, max_len)}
    return DSpark(cfg, tables)


def anchors_of(ids, weights, stride, generator):
    """Anchor positions p (every `stride`-th, random phase) that have all 5 targets p+2..p+6 and
    whose first target is a trained token (an assistant token in a chat)."""
    b, s = ids.shape
    phase = int(torch.randint(0, stride, (1,), generator=generator))
    keep = torch.zeros(b, s, dtype=torch.bool)
    keep[:, phase : s - 6 : stride] = True
    keep[:, : s - 6] &= weights[:, 1 : s - 5]  # weights[:, j] marks target token j + 1
    return torch.nonzero(keep, as_tuple=True)


def step_losses(draft, backbone, ids, weights, generator, stride):
    with torch.no_grad():
        target_logits, taps, _ = backbone(ids, return_taps=True)
    ab, ap = anchors_of(ids, weights, stride, generator)
    if len(ab) == 0:
        return None  # no trained token to draft in this batch (a chat window of prompt only)
    slots = ap.unsqueeze(1) + 1 + torch.arange(5)  # slot i's input position p+1+i: predicts the next token
    tokens_in = ids[ab.unsqueeze(1), slots]  # Markov input: the token before each drafted one
    teacher = target_logits[ab.unsqueeze(1), slots]  # backbone's distribution for position p+2+i
    logits, features = draft(backbone, taps, ids, ab, ap, tokens_in)
    logp = torch.log_softmax(logits, -1)
    kl = (torch.softmax(teacher, -1) * (torch.log_softmax(teacher, -1) - logp)).sum(-1).mean()
    hit = logits.argmax(-1) == teacher.argmax(-1)
    survives = torch.cumprod(hit.float(), dim=1)
    conf = draft.confidence_logits(features.detach())
    bce = F.binary_cross_entropy_with_logits(conf, survives)
    accepted = survives.sum(1).mean() + 1  # greedy accepted tokens per step, bonus included
    return kl, bce, float(accepted)


def main():
    import train

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=REPO / "build" / "train")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--text-batch", default="8x256")
    ap.add_argument("--chat-batch", default="4x512")
    ap.add_argument("--stride", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    backbone, cfg, tok = train.build(args.work)
    backbone.load_state_dict(torch.load(args.work / train.TUNED_CHECKPOINT)["model"])
    backbone.requires_grad_(False)
    backbone.eval()
    draft = build(cfg)
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    data = torch.load(args.work / "data.pt")
    batches = train.Batches(data, bos, args.seed, train.parse_shape(args.text_batch), train.parse_shape(args.chat_batch))
    opt = torch.optim.AdamW(draft.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt_path, log_path = args.work / "dspark.pt", args.work / "dspark_log.csv"
    step = 0
    if ckpt_path.exists():
        state = torch.load(ckpt_path)
        draft.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        print(f"resuming at step {step}")
    new_log = not log_path.exists() or step == 0
    with open(log_path, "w" if new_log else "a", newline="") as f:
        log = csv.writer(f)
        if new_log:
            log.writerow(["step", "kind", "kl", "confidence_bce", "accepted_per_step", "lr", "seconds"])
        while step < args.steps:
            t0 = time.time()
            lr = args.lr * min(1.0, (step + 1) / 10) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
            for group in opt.param_groups:
                group["lr"] = lr
            kind, ids, _, weights = batches(step)
            generator = torch.Generator().manual_seed(args.seed + step)
            losses = step_losses(draft, backbone, ids, weights, generator, args.stride)
            step += 1
            if losses is not None:
                kl, bce, accepted = losses
                train.apply_update(draft, opt, kl + bce)
                log.writerow([step, kind, f"{float(kl):.4f}", f"{float(bce):.4f}", f"{accepted:.3f}", f"{lr:.2e}",
                              f"{time.time() - t0:.2f}"])
                f.flush()
                print(f"dspark step {step} {kind} kl {float(kl):.4f} bce {float(bce):.4f} accepted {accepted:.2f} "
                      f"{time.time() - t0:.1f}s", flush=True)
            if step % args.save_every == 0 or step == args.steps:
                train.save_checkpoint(ckpt_path, {"model": draft.state_dict(), "optimizer": opt.state_dict(), "step": step})

if __name__ == "__main__":
    main()
