"""Loss curves of a training run as PNG plots (tools/train/loss_backbone.png, loss_tuned.png,
loss_dspark.png)."""

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def smooth(values, k=15):
    out, acc = [], []
    for v in values:
        acc = (acc + [v])[-k:]
        out.append(sum(acc) / len(acc))
    return out


def backbone(rows, out):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for kind, color in (("text", "tab:blue"), ("chat", "tab:orange")):
        pts = [(int(r["step"]), float(r["loss"])) for r in rows if r["kind"] == kind]
        ax.plot([s for s, _ in pts], smooth([v for _, v in pts]), color=color, label=f"train loss, {kind} batches")
    held = [(int(r["step"]), float(r["held_out_loss"])) for r in rows if r["held_out_loss"]]
    ax.plot([s for s, _ in held], [v for _, v in held], "k.-", label="held-out Revelation loss")
    kl = [(int(r["step"]), float(r["indexer_kl"])) for r in rows]
    ax.plot([s for s, _ in kl], smooth([v for _, v in kl]), color="tab:green", alpha=0.7, label="indexer KL")
    ax.set_xlabel("step")
    ax.set_ylabel("nats / token")
    ax.set_yscale("log")
    ax.set_title("kjv-tiny backbone (QAT: FP8/FP4 fake-quant forward)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def tuned(rows, out):
    """The unlikelihood fine-tune: its two losses per step, and per round how often the model's
    own greedy continuations of training prompts loop."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    trained = [r for r in rows if r["mle_loss"]]
    for kind, color in (("text", "tab:blue"), ("chat", "tab:orange")):
        pts = [(int(r["step"]), float(r["mle_loss"])) for r in trained if r["kind"] == kind]
        ax.plot([s for s, _ in pts], smooth([v for _, v in pts], 5), color=color, label=f"MLE loss, {kind} batches")
    steps = [int(r["step"]) for r in trained]
    ax.plot(steps, smooth([float(r["ul_loss"]) for r in trained], 5), color="tab:green", label="unlikelihood loss")
    held = [(int(r["step"]), float(r["held_out_loss"])) for r in rows if r["held_out_loss"]]
    ax.plot([s for s, _ in held], [v for _, v in held], "k.-", label="held-out Revelation loss")
    ax.set_xlabel("fine-tune step")
    ax.set_ylabel("nats / token")
    ax2 = ax.twinx()
    pool = [(int(r["step"]), 100 * float(r["pool_looping"])) for r in rows if r["pool_looping"]]
    ax2.plot([s for s, _ in pool], [v for _, v in pool], "s--", color="tab:red",
             label="greedy continuations that loop, % (at each round's start)")
    ax2.set_ylabel("%")
    ax2.set_ylim(0, 100)
    lines, lines2 = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="center right")
    ax.set_title("kjv-tiny unlikelihood fine-tune against greedy repetition")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def dspark(rows, out):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    steps = [int(r["step"]) for r in rows]
    ax.plot(steps, smooth([float(r["kl"]) for r in rows]), label="draft KL to the backbone")
    ax.plot(steps, smooth([float(r["confidence_bce"]) for r in rows]), label="confidence head BCE")
    ax.set_xlabel("step")
    ax.set_ylabel("nats")
    ax2 = ax.twinx()
    ax2.plot(steps, smooth([float(r["accepted_per_step"]) for r in rows]), color="tab:red",
             label="greedy accepted / step (teacher-forced, train batch)")
    ax2.set_ylabel("tokens / step")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="center right")
    ax.set_title("kjv-tiny DSpark head (frozen backbone)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, default=REPO / "build" / "train")
    ap.add_argument("--out", type=Path, default=REPO / "tools" / "train")
    args = ap.parse_args()
    if (args.work / "backbone_log.csv").exists():
        backbone(read(args.work / "backbone_log.csv"), args.out / "loss_backbone.png")
    if (args.work / "tuned_log.csv").exists():
        tuned(read(args.work / "tuned_log.csv"), args.out / "loss_tuned.png")
    if (args.work / "dspark_log.csv").exists():
        dspark(read(args.work / "dspark_log.csv"), args.out / "loss_dspark.png")


if __name__ == "__main__":
    main()
