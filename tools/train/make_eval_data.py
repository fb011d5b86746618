"""The held-out evaluation data the engine tests read (tests/data/models/kjv-tiny/eval/):

  text_prompts.json   10 prompts from Revelation (never trained on): a chapter heading and the
                      first words of its first verse
  corpus_words.txt    every distinct word of the training text, lowercased, one per line
  chats.jsonl         held-out chats cut before the first assistant turn: 100 that need a tool
                      call (with the tool the answer must call) and 100 thinking-mode prompts
"""

import argparse
import json
import re
from pathlib import Path

import corpus

REPO = Path(__file__).resolve().parents[2]
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def words(text):
    return WORD.findall(text.lower())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=REPO / "build" / "train")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "models" / "kjv-tiny" / "eval")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    train_ch, held_ch = corpus.split(corpus.read_verses())

    vocab = sorted({w for _, _, vs in train_ch for v in vs for w in words(v.text)} | {w for b, _, _ in train_ch for w in words(b)})
    (args.out / "corpus_words.txt").write_text("\n".join(vocab) + "\n")

    prompts = []
    for book, chapter, vs in held_ch[:: max(1, len(held_ch) // 10)][:10]:
        first = vs[0].text.split()
        prompts.append(f"{book} {chapter}\n" + " ".join(first[: max(4, len(first) // 3)]))
    (args.out / "text_prompts.json").write_text(json.dumps(prompts, indent=1) + "\n")

    tool, think = [], []
    for line in open(args.work / "chats_held_out.jsonl"):
        chat = json.loads(line)
        upto = next(i for i, m in enumerate(chat["messages"]) if m["role"] == "assistant")
        first = chat["messages"][upto]
        case = dict(messages=chat["messages"][:upto], tools=chat["tools"], thinking=chat["thinking"])
        if chat.get("reasoning_effort"):
            case["reasoning_effort"] = chat["reasoning_effort"]
        if first.get("tool_calls") and len(tool) < 100:
            tool.append(dict(case, expect_tool=first["tool_calls"][0]["function"]["name"]))
        elif not first.get("tool_calls") and chat["thinking"] and len(think) < 100:
            think.append(dict(case, expect_thinking=True))
    with open(args.out / "chats.jsonl", "w") as f:
        for case in tool + think:
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"{len(vocab)} corpus words, {len(prompts)} text prompts, {len(tool)} tool chats, {len(think)} thinking chats")


if __name__ == "__main__":
    main()
