"""Step 2: train the backbone, quantization-aware (fp32 master weights, FP8/FP4 fake-quant forward).

Batches are text (windows of the chapter stream, each opened by BOS, loss on every token), and
every --chat-every-th one chats (from a chat's BOS, loss on the assistant's tokens only). The batch of
step k is drawn from a generator seeded with (seed, k), so a resumed run sees exactly the data an
uninterrupted one would. A checkpoint (model, optimizer, step) is written every --save-every steps
and at the end; rerunning the same command resumes from it.
"""

import argparse
import csv
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

import config
import model as M

REPO = Path(__file__).resolve().parents[2]
# The backbone after unlikelihood.py's fine-tune: what dspark.py, export.py and evaluate.py read.
TUNED_CHECKPOINT = "tuned.pt"


def model_config(work):
    """The model's flat config, completed with what the tokenizer decides."""
    tok = Tokenizer.from_file(str(work / "tokenizer" / "tokenizer.json"))
    cfg = dict(config.MODEL)
    _, count = M.compressed_token_map(tok)
    cfg["engram_compressed_vocab_size"] = count
    cfg["engram_num_embeddings"] = [sum(sum(per) for per in layer) for layer in M.engram_primes(cfg)]
    cfg["dspark_noise_token_id"] = tok.token_to_id("<｜System｜>")  # as in the release (128799)
    if tok.get_vocab_size(with_added_tokens=True) != cfg["vocab_size"]:
        raise SystemExit(f"tokenizer has {tok.get_vocab_size()} ids, the model {cfg['vocab_size']}")
    return cfg, tok


def build(work, max_len=4096):
    cfg, tok = model_config(work)
    return M.Transformer(cfg, M.EngramHasher(cfg, tok), max_len=max_len), cfg, tok


class Batches:
    def __init__(self, data, bos, seed, text_shape, chat_shape, chat_every=2):
        self.text, self.chat, self.mask = data["text"].long(), data["chat"].long(), data["chat_mask"]
        self.bos, self.seed, self.chat_every = bos, seed, chat_every
        self.text_shape, self.chat_shape = text_shape, chat_shape
        self.chat_starts = torch.nonzero(self.chat == bos).flatten()
        self.chat_starts = self.chat_starts[self.chat_starts < len(self.chat) - chat_shape[1] - 1]

    def __call__(self, step):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        if step % self.chat_every != self.chat_every - 1:
            b, s = self.text_shape
            starts = torch.randint(0, len(self.text) - s, (b,), generator=g)
            ids = torch.stack([torch.cat([torch.tensor([self.bos]), self.text[i : i + s - 1]]) for i in starts.tolist()])
            targets = ids[:, 1:]
            weights = torch.ones_like(targets, dtype=torch.bool)
            return "text", ids, targets, weights
        b, s = self.chat_shape
        starts = self.chat_starts[torch.randint(0, len(self.chat_starts), (b,), generator=g)]
        ids = torch.stack([self.chat[i : i + s] for i in starts.tolist()])
        weights = torch.stack([self.mask[i + 1 : i + s] for i in starts.tolist()])
        return "chat", ids, ids[:, 1:], weights


def parse_shape(text):
    """"16x256" -> (16, 256): a batch shape flag."""
    return tuple(int(v) for v in text.split("x"))


def backbone_optimizer(model, lr):
    """AdamW with weight decay on the matrices only."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def apply_update(module, opt, loss):
    """One optimizer step on `loss`, gradients clipped to norm 1, then the MoE selection-bias update
    (auxiliary-loss-free balancing) of every MoE layer of `module`."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    for moe in module.moe_layers():
        moe.update_bias(1e-3)


def save_checkpoint(path, state):
    """torch.save through a temporary file, so an interrupted write never replaces a checkpoint."""
    tmp = Path(str(path) + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def loss_of(model, ids, targets, weights):
    logits, _, indexer_losses = model(ids)
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    w = weights.reshape(-1).float()
    return (ce * w).sum() / w.sum().clamp_min(1), indexer_losses


@torch.no_grad()
def held_out_loss(model, held, bos, length, count):
    """Mean next-token loss on `count` evenly spaced BOS-opened windows of the held-out text."""
    total, n = 0.0, 0
    for k in range(count):
        i = (len(held) - length) * k // max(count - 1, 1)
        ids = torch.cat([torch.tensor([bos]), held[i + 1 : i + length]]).unsqueeze(0)
        loss, _ = loss_of(model, ids, ids[:, 1:], torch.ones(1, length - 1, dtype=torch.bool))
        total, n = total + float(loss), n + 1
    return total / n


def parse_schedule(text):
    """"0:960,150:560,500:960" -> [(0, 960), (150, 560), (500, 960)]: from each step on, the cosine
    is the one of a run of that many steps. The committed model was trained with the default: its
    runs were cut short and later resumed, and this reproduces the learning rates they used."""
    segments = [tuple(int(v) for v in part.split(":")) for part in text.split(",")]
    if segments[0][0] != 0 or any(a[0] >= b[0] for a, b in zip(segments, segments[1:])):
        raise SystemExit(f"--schedule {text}: segments must start at step 0 and increase")
    return segments


def lr_at(step, schedule, peak, warmup):
    steps = [total for start, total in schedule if start <= step][-1]
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min((step - warmup) / max(steps - warmup, 1), 1.0)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=REPO / "build" / "train")
    ap.add_argument("--steps", type=int, default=960)
    ap.add_argument("--schedule", default="0:960,150:560,500:960",
                    help="learning-rate schedule segments START:STEPS (see parse_schedule)")
    ap.add_argument("--lr", type=float, default=2.5e-3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--text-batch", default="16x256")
    ap.add_argument("--chat-batch", default="8x512")
    ap.add_argument("--chat-every", type=int, default=4, help="every N-th batch is a chat batch")
    ap.add_argument("--save-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    schedule = parse_schedule(args.schedule)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    model, cfg, tok = build(args.work)
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    data = torch.load(args.work / "data.pt")
    batches = Batches(data, bos, args.seed, parse_shape(args.text_batch), parse_shape(args.chat_batch),
                      args.chat_every)
    opt = backbone_optimizer(model, args.lr)
    ckpt_path, log_path = args.work / "backbone.pt", args.work / "backbone_log.csv"
    step = 0
    if ckpt_path.exists():
        state = torch.load(ckpt_path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        print(f"resuming at step {step}")
    (args.work / "model_config.json").write_text(json.dumps(cfg, indent=1) + "\n")

    new_log = not log_path.exists() or step == 0
    with open(log_path, "w" if new_log else "a", newline="") as f:
        log = csv.writer(f)
        if new_log:
            log.writerow(["step", "kind", "loss", "indexer_kl", "lr", "seconds", "held_out_loss"])
        while step < args.steps:
            t0 = time.time()
            lr = lr_at(step, schedule, args.lr, args.warmup)
            for group in opt.param_groups:
                group["lr"] = lr
            kind, ids, targets, weights = batches(step)
            loss, indexer_losses = loss_of(model, ids, targets, weights)
            kl = sum(indexer_losses) / max(len(indexer_losses), 1)
            apply_update(model, opt, loss + kl)
            step += 1
            held = ""
            if step % args.eval_every == 0 or step == args.steps:
                held = f"{held_out_loss(model, data['held_out'].long(), bos, 256, 8):.4f}"
            log.writerow([step, kind, f"{float(loss):.4f}", f"{float(kl):.4f}", f"{lr:.2e}", f"{time.time() - t0:.2f}", held])
            f.flush()
            print(f"step {step} {kind} loss {float(loss):.4f} kl {float(kl):.4f} lr {lr:.2e} {time.time() - t0:.1f}s"
                  + (f" held-out {held}" if held else ""), flush=True)
            if step % args.save_every == 0 or step == args.steps:
                save_checkpoint(ckpt_path, {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step})


if __name__ == "__main__":
    main()
