"""Step 2b: a sequence-level unlikelihood fine-tune of the backbone against greedy repetition.

A tiny model trained by maximum likelihood alone loops under greedy decoding ("and a man of God,
and a man of God, ..."), and more pretraining steps did not cure it (8 of 10 held-out
continuations looped at step 500, 9 at 825, 6 at 960). This is the remedy of Welleck et al. 2019,
"Neural Text Generation with Unlikelihood Training", section 5.2: in rounds, the current model
continues training-text prompts greedily; every continuation token that completes an n-gram
already in its sequence is pushed down with -log(1 - p); each step also takes an ordinary MLE
batch (text, every --chat-every-th one a chat batch) so that perplexity and the chat format hold.
The pool also holds training chats, continued from their first assistant turn: there the loops are
in the reasoning ("6 + 6 = 6, 6 + 6 = 6, ..."), so only n-grams repeated inside the reply count
(a reply may quote the prompt), and only up to its first DSML token (a call with several
parameters repeats its markup by design) or its end.

The continuations come from the engine itself (`deepinfer generate` on the current weights,
exported without the DSpark head): it is the decoder the acceptance test uses, and it is ~17x
faster than a cacheless torch loop. The exported codes are the ones the QAT forward computes, so
the engine decodes the very model being tuned.

Reads backbone.pt (train.py's end state); writes tuned.pt (a checkpoint after every round; a
rerun resumes at the next round) and tuned_log.csv. dspark.py, export.py and evaluate.py read
tuned.pt.
"""

import argparse
import csv
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

import export
import train

REPO = Path(__file__).resolve().parents[2]
LOG_COLUMNS = ["round", "step", "mle_loss", "ul_loss", "marked_tokens", "pool_looping", "pool_marked", "seconds",
               "held_out_loss", "chat_marked", "kind"]


def repeated_ngram_mask(seq, begin, n, end=None):
    """Bool per position of `seq` (a list of ids): True where the position is inside an n-gram that
    lies in [begin, end) and occurred earlier in `seq` (Welleck's candidate set C_t)."""
    end = len(seq) if end is None else end
    mask, seen = [False] * len(seq), set()
    for s in range(end - n + 1):
        gram = tuple(seq[s : s + n])
        if s >= begin and gram in seen:
            for t in range(s, s + n):
                mask[t] = True
        seen.add(gram)
    return mask


class Sample:
    """A prompt, the model's greedy continuation, and which continuation tokens are candidates."""

    def __init__(self, prompt, continuation, n, stops=None):
        self.prompt, self.continuation = prompt, continuation
        if stops is None:  # text: n-grams repeated anywhere in the sequence, the prompt included
            self.marks = repeated_ngram_mask(prompt + continuation, len(prompt), n)
        else:  # a chat reply: repeats inside the reply, up to its first stop token
            end = next((i for i, t in enumerate(continuation) if t in stops), len(continuation))
            self.marks = [False] * len(prompt) + repeated_ngram_mask(continuation, 0, n, end)


def max_ngram_count(seq, n):
    counts = {}
    for s in range(len(seq) - n + 1):
        gram = tuple(seq[s : s + n])
        counts[gram] = counts.get(gram, 0) + 1
    return max(counts.values(), default=0)


def prompts(text, bos, newline_ids, count, generator):
    """`count` BOS-opened prompts of the training text: half chapter openings (heading and the first
    words, as the held-out test prompts are), half verse openings inside a chapter."""
    ids = text.tolist()
    chapters = [i for i, t in enumerate(ids) if t == bos]
    verses = [i + 1 for i, t in enumerate(ids) if t in newline_ids and i + 1 < len(ids) and ids[i + 1] != bos]
    out = []
    for k in range(count):
        length = int(torch.randint(6, 20, (1,), generator=generator))
        if k % 2 == 0:
            start = chapters[int(torch.randint(0, len(chapters), (1,), generator=generator))] + 1
        else:
            start = verses[int(torch.randint(0, len(verses), (1,), generator=generator))]
        body = [t for t in ids[start : start + length] if t != bos]
        out.append([bos] + body)
    return out


def chat_prompts(chat, mask, bos, count, generator):
    """`count` training chats up to their first assistant token (the prompt the model answers)."""
    ids, trained = chat.tolist(), mask.tolist()
    starts = [i for i, t in enumerate(ids) if t == bos]
    out = []
    for _ in range(count):
        start = starts[int(torch.randint(0, len(starts), (1,), generator=generator))]
        first = next(j for j in range(start + 1, len(ids)) if trained[j])
        out.append(ids[start:first])
    return out


def greedy_continuations(deepinfer, model_dir, prompt_ids, tokens, jobs, ignore_eos):
    def one(prompt):
        run = subprocess.run(
            [deepinfer, "generate", "--model", str(model_dir), "--prompt-ids", ",".join(map(str, prompt)),
             "--max-tokens", str(tokens), "--show-ids", "--threads", "1"] + (["--ignore-eos"] if ignore_eos else []),
            capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"deepinfer generate failed ({run.returncode}): {run.stderr.strip()}")
        line = [ln for ln in run.stdout.splitlines() if ln.startswith("ids:")]
        if not line:
            raise SystemExit(f"deepinfer generate printed no ids line: {run.stdout[-200:]!r}")
        return [int(v) for v in line[-1].split()[1:]]

    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(one, prompt_ids))


def unlikelihood_loss(model, samples):
    """Sum over marked continuation tokens of -log(1 - p), divided by the continuation tokens."""
    seqs = [x.prompt + x.continuation for x in samples]
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    marks = torch.zeros(len(seqs), width, dtype=torch.bool)
    for b, (x, s) in enumerate(zip(samples, seqs)):
        ids[b, : len(s)] = torch.tensor(s)
        marks[b, : len(s)] = torch.tensor(x.marks)
    logits, _, _ = model(ids)
    p = torch.softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    marked = marks[:, 1:]
    ul = -(torch.log((1 - p).clamp_min(1e-5)) * marked).sum()
    return ul / sum(len(x.continuation) for x in samples), float(marked.float().sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=REPO / "build" / "train")
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "src" / "cli" / "deepinfer"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps-per-round", type=int, default=20)
    ap.add_argument("--ul-batch", type=int, default=8, help="text continuations per unlikelihood update")
    ap.add_argument("--ul-chat-batch", type=int, default=4, help="chat replies per unlikelihood update")
    ap.add_argument("--tokens", type=int, default=64, help="greedy continuation length")
    ap.add_argument("--ngram", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=1.0, help="weight of the unlikelihood term")
    ap.add_argument("--lr", type=float, default=2.5e-4)
    ap.add_argument("--text-batch", default="8x256")
    ap.add_argument("--chat-batch", default="4x512")
    ap.add_argument("--chat-every", type=int, default=2)
    ap.add_argument("--chat-from-round", type=int, default=4,
                    help="rounds before this one take no chat replies and a chat MLE batch every 4th step only "
                         "(the committed run added the chats at round 4, when its thinking score had dropped)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    model, cfg, tok = train.build(args.work)
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    data = torch.load(args.work / "data.pt")
    text_shape, chat_shape = train.parse_shape(args.text_batch), train.parse_shape(args.chat_batch)
    batches = train.Batches(data, bos, args.seed, text_shape, chat_shape, args.chat_every)
    text_only_batches = train.Batches(data, bos, args.seed, text_shape, chat_shape, 4)
    opt = train.backbone_optimizer(model, args.lr)
    ckpt_path, log_path = args.work / train.TUNED_CHECKPOINT, args.work / "tuned_log.csv"
    source = ckpt_path if ckpt_path.exists() else args.work / "backbone.pt"
    state = torch.load(source)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    done = state.get("round", 0) if source == ckpt_path else 0
    print(f"starting at round {done} from {source.name}")
    if done and log_path.exists():  # drop the rows of a round that was interrupted
        with open(log_path) as f:
            rows = list(csv.reader(f))
        with open(log_path, "w", newline="") as f:
            csv.writer(f).writerows([LOG_COLUMNS] + [r for r in rows[1:] if int(r[0]) < done])
    for group in opt.param_groups:
        group["lr"] = args.lr
    newline_ids = {i for i in range(tok.get_vocab_size()) if tok.decode([i]).endswith("\n")}
    reply_stops = {tok.token_to_id("｜DSML｜"), tok.token_to_id("<｜end▁of▁sentence｜>")}
    generation_cfg = export.backbone_only_config(cfg)
    held = data["held_out"].long()

    new_log = done == 0
    with open(log_path, "w" if new_log else "a", newline="") as f, tempfile.TemporaryDirectory() as tmp:
        log = csv.writer(f)
        if new_log:
            log.writerow(LOG_COLUMNS)
        for rnd in range(done, args.rounds + 1):  # the last pass measures the tuned model only
            t0 = time.time()
            generator = torch.Generator().manual_seed(args.seed * 1_000_003 + rnd)
            text_prompts = prompts(data["text"], bos, newline_ids, args.ul_batch * args.steps_per_round, generator)
            chat_batch = args.ul_chat_batch if rnd >= args.chat_from_round else 0
            chats = chat_prompts(data["chat"], data["chat_mask"], bos, chat_batch * args.steps_per_round, generator)
            export.write_model_dir(Path(tmp) / "model", generation_cfg, export.backbone_tensors(model, generation_cfg),
                                   args.work / "tokenizer")
            texts = [Sample(p, c, args.ngram) for p, c in zip(text_prompts, greedy_continuations(
                args.deepinfer, Path(tmp) / "model", text_prompts, args.tokens, 2, ignore_eos=True))]
            replies = [Sample(p, c, args.ngram, reply_stops) for p, c in zip(chats, greedy_continuations(
                args.deepinfer, Path(tmp) / "model", chats, args.tokens, 2, ignore_eos=False))]
            looping = sum(max_ngram_count(x.continuation, 8) >= 3 for x in texts) / len(texts)
            marked = sum(sum(x.marks) for x in texts) / sum(len(x.continuation) for x in texts)
            chat_marked = sum(sum(x.marks) for x in replies) / max(sum(len(x.continuation) for x in replies), 1)
            print(f"round {rnd}: {len(texts)} text continuations and {len(replies)} chat replies in "
                  f"{time.time() - t0:.0f}s; text: {looping:.0%} loop (an 8-gram 3+ times), {marked:.1%} of tokens "
                  f"repeat a {args.ngram}-gram; chat replies: {chat_marked:.1%}", flush=True)
            if rnd == args.rounds:
                log.writerow([rnd, rnd * args.steps_per_round, "", "", "", f"{looping:.3f}", f"{marked:.4f}",
                              f"{time.time() - t0:.2f}", "", f"{chat_marked:.4f}", ""])
                break
            for k in range(args.steps_per_round):
                t1 = time.time()
                step = rnd * args.steps_per_round + k
                batch = texts[k * args.ul_batch : (k + 1) * args.ul_batch]
                batch += replies[k * chat_batch : (k + 1) * chat_batch]
                ul, count = unlikelihood_loss(model, batch)
                kind, ids, targets, weights = (batches if rnd >= args.chat_from_round else text_only_batches)(step)
                mle, indexer_losses = train.loss_of(model, ids, targets, weights)
                kl = sum(indexer_losses) / max(len(indexer_losses), 1)
                train.apply_update(model, opt, mle + kl + args.alpha * ul)
                mle, ul = mle.detach(), ul.detach()
                last = k == args.steps_per_round - 1
                held_loss = f"{train.held_out_loss(model, held, bos, 256, 8):.4f}" if last else ""
                log.writerow([rnd, step + 1, f"{float(mle):.4f}", f"{float(ul):.4f}", int(count),
                              f"{looping:.3f}" if k == 0 else "", f"{marked:.4f}" if k == 0 else "",
                              f"{time.time() - t1:.2f}", held_loss, f"{chat_marked:.4f}" if k == 0 else "", kind])
                f.flush()
                print(f"round {rnd} step {step + 1} mle {float(mle):.4f} ul {float(ul):.4f} marked {int(count)} "
                      f"{time.time() - t1:.1f}s" + (f" held-out {held_loss}" if held_loss else ""), flush=True)
            train.save_checkpoint(ckpt_path, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                              "round": rnd + 1})


if __name__ == "__main__":
    main()
