"""A byte-level BPE trained on the corpus with HF `tokenizers`, in the DeepSeek-V3/V4.1 layout.

The pre-tokenizer, normalizer, decoder and post-processor are the ones of the V4.1-lineage
tokenizer.json the engine already reads (data/tokenizer/tokenizer.json), so only the merges and
the vocabulary differ. The V4.1 special tokens come first as added tokens, so BOS = 0, EOS = 1
and the Engram pad = 2 as in the release.
"""

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, pre_tokenizers, trainers

REPO = Path(__file__).resolve().parents[2]
LINEAGE_TOKENIZER = REPO / "data" / "tokenizer" / "tokenizer.json"

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
SYSTEM = "<｜System｜>"
# Every special string the V4.1 chat encoder renders, plus the image placeholder it rejects
# as literal text and a few task tokens of the release, in a fixed order.
SPECIAL_TOKENS = [
    BOS, EOS, PAD, "<｜User｜>", "<｜Assistant｜>", SYSTEM, "<think>", "</think>", "｜DSML｜",
    "<｜latest_reminder｜>", "<｜deepseek_image｜>", "<｜action｜>", "<｜query｜>", "<｜authority｜>",
    "<｜domain｜>", "<｜title｜>", "<｜read_url｜>",
]


def released_special(content, lineage):
    """The `special` flag the release gives an added token: the lineage file's, else false. Only
    BOS, EOS and pad are special; the chat-format markers are not, so that decoding a reply with
    skip_special_tokens (as servers do) keeps its </think> and DSML markup."""
    flags = {t["content"]: t["special"] for t in lineage["added_tokens"]}
    return flags.get(content, False)


def train(texts, vocab_size):
    """A Tokenizer trained on the iterable of strings `texts`."""
    lineage = json.loads(LINEAGE_TOKENIZER.read_text())
    # Same pipeline as the release (regex splits, byte-level mapping); only the model is trained.
    pipeline = {key: lineage[key] for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}
    tok = Tokenizer.from_str(json.dumps({**_skeleton(), **pipeline}))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[AddedToken(t, special=released_special(t, lineage), normalized=False)
                                              for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _skeleton():
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": {}, "merges": []}}


def save(tok, out_dir, model_max_length):
    out_dir = Path(out_dir)
    tok.save(str(out_dir / "tokenizer.json"))

    def added(content):
        return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": True, "rstrip": False,
                "single_word": False}

    # As in the released DeepSeek files: a text prompt starts with BOS, as every training window does.
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": added(BOS), "eos_token": added(EOS),
              "pad_token": added(PAD), "clean_up_tokenization_spaces": False, "legacy": True,
              "model_max_length": model_max_length, "tokenizer_class": "LlamaTokenizerFast",
              "unk_token": None, "use_default_system_prompt": False}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def special_id(tok, content):
    i = tok.token_to_id(content)
    if i is None:
        raise SystemExit(f"tokenizer has no {content!r}")
    return i
