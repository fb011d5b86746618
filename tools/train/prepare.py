"""Step 1 of the training run: corpus, chat set, tokenizer, token arrays.

Writes into WORK (default build/train):
  tokenizer/tokenizer.json, tokenizer/tokenizer_config.json
  data.pt      training text tokens, chat tokens with their loss masks, held-out Revelation tokens
  chats_held_out.jsonl   the held-out chats (messages, tools, thinking, kind, tool)
  revelation.txt         the held-out text, for `deepinfer perplexity`
The chats are rendered with the engine's V4.1 chat encoder (`deepinfer chat-template`, byte-identical
to the official encoding_dsv41.py on its fixtures).
"""

import argparse
import json
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

import chats as chatgen
import corpus
import tokenizer as toks

REPO = Path(__file__).resolve().parents[2]


def render(deepinfer, chat, upto=None):
    """The V4.1 prompt for chat's messages (the first `upto` only, ending with the generation prompt)."""
    messages = chat["messages"] if upto is None else chat["messages"][:upto]
    request = {"messages": messages, "tools": chat["tools"] or None, "thinking": chat["thinking"]}
    if chat.get("reasoning_effort"):
        request["reasoning_effort"] = chat["reasoning_effort"]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=True) as f:
        json.dump({k: v for k, v in request.items() if v is not None}, f)
        f.flush()
        out = subprocess.run([deepinfer, "chat-template", "--messages", f.name], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"chat-template failed: {out.stderr.strip()}")
    return out.stdout


def render_all(deepinfer, items):
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda c: render(deepinfer, c), items))


def assistant_mask(ids, assistant_id, eos_id):
    """1 for the tokens the model must produce: after each <｜Assistant｜> and the one mode token that
    follows it (<think> or </think>, part of the prompt), through the turn's EOS."""
    mask = [0] * len(ids)
    i = 0
    while i < len(ids):
        if ids[i] == assistant_id:
            j = i + 2
            while j < len(ids):
                mask[j] = 1
                if ids[j] == eos_id:
                    break
                j += 1
            i = j
        i += 1
    return mask


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=REPO / "build" / "train")
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "src" / "cli" / "deepinfer"))
    ap.add_argument("--chats", type=int, default=20000)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    verses = corpus.read_verses()
    train_ch, held_ch = corpus.split(verses)
    train_docs = [corpus.chapter_text(b, c, vs) for b, c, vs in train_ch]
    held_text = "".join(corpus.chapter_text(b, c, vs) for b, c, vs in held_ch)
    (args.work / "revelation.txt").write_text(held_text)

    train_chats, held_chats = chatgen.generate(train_ch, args.chats, args.seed)
    print(f"{len(train_docs)} training chapters, {len(held_ch)} held-out chapters; "
          f"{len(train_chats)} training chats, {len(held_chats)} held-out chats")
    rendered = render_all(args.deepinfer, train_chats)

    tok = toks.train(train_docs + rendered, args.vocab)
    tok_dir = args.work / "tokenizer"
    tok_dir.mkdir(exist_ok=True)
    toks.save(tok, tok_dir, model_max_length=4096)
    bos, eos = toks.special_id(tok, toks.BOS), toks.special_id(tok, toks.EOS)
    assistant = toks.special_id(tok, "<｜Assistant｜>")

    # Text: one stream of chapters, each opened by BOS.
    text_ids = []
    for doc in train_docs:
        text_ids.append(bos)
        text_ids += tok.encode(doc, add_special_tokens=False).ids
    held_ids = [bos] + tok.encode(held_text, add_special_tokens=False).ids
    chat_ids, chat_mask = [], []
    for r in rendered:
        ids = tok.encode(r, add_special_tokens=False).ids
        if ids[0] != bos:
            raise SystemExit("a rendered chat does not start with BOS")
        chat_ids += ids
        chat_mask += assistant_mask(ids, assistant, eos)
    text_bytes = sum(len(d.encode()) for d in train_docs)
    print(f"vocab {tok.get_vocab_size()}; text {len(text_ids)} tokens ({text_bytes / len(text_ids):.2f} bytes/token); "
          f"chats {len(chat_ids)} tokens ({sum(chat_mask)} trained); Revelation {len(held_ids)} tokens")
    torch.save(dict(text=torch.tensor(text_ids, dtype=torch.int32), chat=torch.tensor(chat_ids, dtype=torch.int32),
                    chat_mask=torch.tensor(chat_mask, dtype=torch.bool),
                    held_out=torch.tensor(held_ids, dtype=torch.int32)), args.work / "data.pt")
    with open(args.work / "chats_held_out.jsonl", "w") as f:
        for c in held_chats:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
