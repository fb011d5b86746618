#!/usr/bin/env python3
"""Generates the tokenizer test corpus in tests/data/tokenizer/corpus/ (deterministic).

The text is synthetic, so no third-party prose or code is committed: words are sampled from
the tokenizer's own vocabulary (English and CJK tokens, frequent ones more often) and arranged
into sentences, code, chat transcripts and stress cases (emoji, rare scripts, characters new in
Unicode 15/16, whitespace runs, digit runs, special-token strings, invalid UTF-8 bytes).

Usage: /root/gv/bin/python tools/golden/tokenizer/make_corpus.py
Then:  /root/gv/bin/python tools/golden/tokenizer/encode_golden.py
"""
import pathlib
import random
import re

from tokenizers import Tokenizer

REPO = pathlib.Path(__file__).resolve().parents[3]
TOKENIZER = REPO / "data/tokenizer/tokenizer.json"
OUTPUT_DIR = REPO / "tests/data/tokenizer/corpus"


class Vocabulary:
    def __init__(self, tokenizer):
        english, chinese, kana = [], [], []
        for token_id in range(128000):
            text = tokenizer.decode([token_id])
            if re.fullmatch(r" [a-z]{2,12}", text):
                english.append(text[1:])
            elif re.fullmatch(r"[\u4e00-\u9fa5]{1,4}", text):
                chinese.append(text)
            elif re.fullmatch(r"[\u3040-\u30ff]{1,4}", text):
                kana.append(text)
        self.english, self.chinese, self.kana = english, chinese, kana
        self.added = [t.content for t in tokenizer.get_added_tokens_decoder().values()]


def zipf_choice(rng, items):
    # Vocabulary order roughly follows frequency; favour the front.
    return items[min(int(rng.paretovariate(0.7)) - 1, len(items) - 1)]


def english(rng, vocab, size):
    out = []
    while sum(map(len, out)) < size:
        words = [zipf_choice(rng, vocab.english) for _ in range(rng.randint(4, 22))]
        words[0] = words[0].capitalize()
        for i in range(1, len(words)):
            roll = rng.random()
            if roll < 0.06:
                words[i] += ","
            elif roll < 0.08:
                words[i] = f'"{words[i]}"'
            elif roll < 0.10:
                words[i] = str(rng.choice([rng.randint(0, 99), rng.randint(1900, 2030), rng.randint(0, 10**7)]))
            elif roll < 0.11:
                words[i] = f"({words[i]})"
            elif roll < 0.12:
                words[i] += rng.choice(["'s", "n't", "'re", "'ll", "-based", "'"])
            elif roll < 0.125:
                words[i] = f"{rng.randint(0, 999)}.{rng.randint(0, 99)}%"
            elif roll < 0.13:
                words[i] = words[i].upper()
            elif roll < 0.132:
                words[i] = f"https://{words[i]}.example.com/{zipf_choice(rng, vocab.english)}?id={rng.randint(0, 999)}"
        sentence = " ".join(words) + rng.choice([".", ".", ".", "?", "!", "...", ":", ";"])
        out.append(sentence + rng.choice([" ", " ", " ", "\n", "\n\n", "  "]))
    return "".join(out)


def chinese(rng, vocab, size):
    out = []
    punctuation = ["，", "。", "、", "；", "：", "！", "？", "“", "”", "（", "）", "《", "》", "……", "——"]
    while sum(len(s.encode()) for s in out) < size:
        parts = []
        for _ in range(rng.randint(3, 30)):
            roll = rng.random()
            if roll < 0.8:
                parts.append(zipf_choice(rng, vocab.chinese))
            elif roll < 0.86:
                parts.append(rng.choice(punctuation))
            elif roll < 0.9:
                parts.append(f"{rng.randint(1, 2030)}年{rng.randint(1, 12)}月{rng.randint(1, 31)}日")
            elif roll < 0.93:
                parts.append(" " + zipf_choice(rng, vocab.english) + " ")
            elif roll < 0.96:
                parts.append(zipf_choice(rng, vocab.kana))
            elif roll < 0.98:
                parts.append("".join(chr(0xFF10 + int(d)) for d in str(rng.randint(0, 99999))))
            else:
                parts.append("\u3000")
        out.append("".join(parts) + rng.choice(["。", "！", "？"]) + rng.choice(["", "", "\n", "\n\n"]))
    return "".join(out)


def identifier(rng, vocab):
    words = [zipf_choice(rng, vocab.english) for _ in range(rng.randint(1, 3))]
    style = rng.random()
    if style < 0.4:
        return "_".join(words)
    if style < 0.8:
        return words[0] + "".join(w.capitalize() for w in words[1:])
    return "".join(w.capitalize() for w in words)


def code(rng, vocab, size):
    out = []
    while sum(map(len, out)) < size:
        name, arg, other = (identifier(rng, vocab) for _ in range(3))
        kind = rng.randrange(5)
        if kind == 0:
            out.append(f"def {name}({arg}, {other}=None):\n    \"\"\"{zipf_choice(rng, vocab.english).capitalize()} "
                       f"the {arg}.\"\"\"\n    if {other} is None:\n        {other} = [{rng.randint(0, 99)}, "
                       f"0x{rng.randint(0, 65535):04x}, {rng.random():.5f}]\n    for i in range(len({arg})):\n"
                       f"        {arg}[i] += {other}[i % 3]  # {zipf_choice(rng, vocab.chinese)}\n    return {arg}\n\n")
        elif kind == 1:
            out.append(f"template <typename T>\nclass {name.capitalize()} {{\n public:\n  explicit {name.capitalize()}"
                       f"(const std::vector<T>& {arg}) : {arg}_({arg}) {{}}\n\n  int {other}() const {{\n"
                       f"\treturn static_cast<int>({arg}_.size()) * {rng.randint(1, 9)} >> 1;\t// TODO\n  }}\n\n"
                       f" private:\n  std::vector<T> {arg}_;\n}};\n\n")
        elif kind == 2:
            out.append(f'{{"{name}": {{"{arg}": [{rng.randint(-999, 999)}, {rng.random() * 1e6:.3e}, true, null], '
                       f'"{other}": "{zipf_choice(rng, vocab.english)}\\n\\t\\u00e9"}}}}\n')
        elif kind == 3:
            out.append(f"| {name} | {arg} | {rng.randint(0, 10**6)} |\n|---|---|---:|\n"
                       f"$ grep -rn '{other}' src/ | awk -F: '{{print $1}}' | sort -u > /tmp/{name}.txt\n\n")
        else:
            indent = rng.choice(["    ", "\t", "  ", "        ", "\t\t"])
            out.append(f"function {name}({arg}) {{\n{indent}const {other} = {arg}.map((x) => x * 2);   \n"
                       f"{indent}return {other}.filter(Boolean);\n}}\n   \n")
    return "".join(out)


def mixed_unicode(rng, size):
    pools = [
        "😀😃😄😁😆🥹😅😂🤣🥲☺️😊😇🙂🙃😉😌😍🥰😘🫨🩷🪿🫎🪼🫏🐦‍🔥🍋‍🟩",
        "👍🏻👍🏼👍🏽👍🏾👍🏿👨‍👩‍👧‍👦🏳️‍🌈🇨🇳🇺🇸🇯🇵1️⃣#️⃣❤️‍🩹",
        "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก", "안녕하세요 세계", "Привет, мир", "Γειά σου κόσμε",
        "∀x∈ℝ: x²≥0 ⇒ √x ∈ ℂ ≠ ∅ ∑∫∂", "→←↑↓↔ ┌─┐│└┘", "é é ñ ñ Å Å ﬁ ① ㎏ Ⅻ",
        "\u200b\u200c\u200d\ufeff\u00a0\u0085\u2028\u2029\u180e\u3000\ue000\ufffd\u00ad",
        "\U000105c0\U000105c1\U00010d50\U00031350\U0002ebf0\U0001fae8\u2ffc\ua7cb",
        "".join(chr(c) for c in range(1, 32) if c not in (10, 13)),
    ]
    out = []
    while sum(len(s.encode()) for s in out) < size:
        roll = rng.random()
        if roll < 0.6:
            pool = rng.choice(pools)
            start = rng.randrange(len(pool))
            out.append(pool[start:start + rng.randint(1, 12)])
        elif roll < 0.8:
            # Any code point, assigned or not (no surrogates).
            code_point = rng.randrange(0x110000)
            out.append(chr(code_point) if not 0xD800 <= code_point < 0xE000 else "?")
        else:
            out.append(rng.choice([" ", "  ", "\n", "a", "1", "x!", " the", "中文"]))
    return "".join(out)


def whitespace_digits(rng, size):
    out = [" " * 20000, "\n", "\t" * 3000, "x"]
    digits = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "①②③¼½¾²³"]
    while sum(map(len, out)) < size:
        roll = rng.random()
        if roll < 0.4:
            out.append("".join(rng.choice([" ", " ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\x0b", "\x0c"])
                               for _ in range(int(rng.paretovariate(0.8)))))
        elif roll < 0.7:
            pool = rng.choice(digits)
            out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 40))))
        elif roll < 0.8:
            out.append(f"{rng.randint(0, 10**9):,}.{rng.randint(0, 999)}")
        else:
            out.append(rng.choice(["a", "word", " x", "!", "-", "(", "中", "é"]))
    return "".join(out)


def special_tokens(rng, vocab, size):
    added = vocab.added
    fragments = ["<｜", "｜>", "<think", "</", "<dsml:", "｜DSML", "<|EOT|", "▁", "<", ">", "｜"]
    out = []
    while sum(len(s.encode()) for s in out) < size:
        roll = rng.random()
        if roll < 0.35:
            out.append(rng.choice(added))
        elif roll < 0.45:
            token = rng.choice(added)
            cut = rng.randrange(1, len(token))
            out.append(token[:cut] if rng.random() < 0.5 else token[cut:])
        elif roll < 0.55:
            out.append(rng.choice(fragments))
        elif roll < 0.65:
            out.append("<｜User｜>" + zipf_choice(rng, vocab.english) + "<｜Assistant｜><think>" +
                       zipf_choice(rng, vocab.chinese) + "</think>" + zipf_choice(rng, vocab.english) +
                       "<｜end▁of▁sentence｜>")
        else:
            out.append(rng.choice([" ", "\n", "", "  "]) + zipf_choice(rng, vocab.english) + rng.choice([" ", "", "\n"]))
    return "".join(out)


def invalid_utf8(rng, vocab, size):
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe\xfe", b"\xe0\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xc2"]
    out = []
    while sum(map(len, out)) < size:
        roll = rng.random()
        if roll < 0.3:
            out.append(rng.choice(bad))
        elif roll < 0.4:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))))
        elif roll < 0.5:
            out.append(rng.choice(vocab.added).encode()[: rng.randint(1, 12)])
        elif roll < 0.75:
            out.append((" " + zipf_choice(rng, vocab.english)).encode())
        else:
            out.append(zipf_choice(rng, vocab.chinese).encode())
    return b"".join(out)


def main():
    rng = random.Random(4242)
    vocab = Vocabulary(Tokenizer.from_file(str(TOKENIZER)))
    OUTPUT_DIR.mkdir(parents=True, exist_ok=True)
    texts = {
        "english.txt": english(rng, vocab, 300_000),
        "chinese.txt": chinese(rng, vocab, 260_000),
        "code.txt": code(rng, vocab, 250_000),
        "mixed_unicode.txt": mixed_unicode(rng, 90_000),
        "whitespace_digits.txt": whitespace_digits(rng, 90_000),
        "special_tokens.txt": special_tokens(rng, vocab, 60_000),
    }
    for name, text in texts.items():
        (OUTPUT_DIR / name).write_bytes(text.encode("utf-8"))
    (OUTPUT_DIR / "invalid_utf8.bin").write_bytes(invalid_utf8(rng, vocab, 50_000))
    for path in sorted(OUTPUT_DIR.iterdir()):
        print(f"{path.stat().st_size:>9} {path.name}")


if __name__ == "__main__":
    main()
