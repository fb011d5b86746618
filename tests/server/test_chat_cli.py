"""`deepinfer chat` with a conversation piped into it, and the CLI's --version and --help."""

import re
import subprocess
from pathlib import Path

COMMANDS = ["generate", "inspect", "bench", "make-model", "tokenize", "chat-template", "serve", "chat"]


def run(deepinfer, args, stdin=""):
    return subprocess.run([deepinfer, *args], input=stdin, capture_output=True, text=True, timeout=300)


def test_piped_conversation(deepinfer, tiny_model):
    conversation = "\n".join([
        "Hello there", "/system Answer briefly.", "How are you?", "/think on", "Why is the sky blue?", "/reset",
        "/bogus", "Start again", "/exit", "this line is never read"]) + "\n"
    r = run(deepinfer, ["chat", "--model", tiny_model, "--max-tokens", "6", "--seed", "3"], conversation)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # Each turn echoed, then a reply; commands acknowledged.
    for line in ["> Hello there", "> How are you?", "> Why is the sky blue?", "> Start again",
                 "(system prompt set)", "(thinking on)", "(history cleared)", "(unknown command /bogus"]:
        assert line in out, out
    assert "never read" not in out
    # Replies are not empty; in thinking mode the reasoning is shown between <think> tags (no
    # ANSI dim: stdout is not a terminal).
    parts = re.split(r"^> (.*)$", out, flags=re.M)[1:]  # turn, what followed, turn, ...
    replies = [after for turn, after in zip(parts[::2], parts[1::2]) if not turn.startswith("/")]
    assert len(replies) == 4 and all(reply.strip() for reply in replies), out
    assert "<think>" in out and "\x1b[" not in out


def test_chat_refuses_a_model_that_cannot_take_text(deepinfer):
    tiny_a = Path(__file__).resolve().parents[2] / "tests" / "data" / "models" / "tiny-a"  # 512 ids
    r = run(deepinfer, ["chat", "--model", str(tiny_a)], "hi\n")
    assert r.returncode == 1
    assert "does not cover its tokenizer" in r.stderr


def test_version(deepinfer):
    r = run(deepinfer, ["--version"])
    assert r.returncode == 0
    assert re.search(r"^deepinfer \d+\.\d+\.\d+$", r.stdout, re.M), r.stdout
    assert re.search(r"^commit   [0-9a-f]{7,}", r.stdout, re.M), r.stdout
    isa = re.search(r"^isa      compiled: scalar, avx2, avx512; this CPU: (scalar|avx2|avx512)$", r.stdout, re.M)
    assert isa, r.stdout
    # An AVX-512 CPU names its kernel plan (--kernel-plan), the others have none.
    plan = re.search(r"^plan     this CPU's avx512 kernel plan: (fma|fp8-gemv-dot|quantized-dot) ", r.stdout, re.M)
    assert bool(plan) == (isa.group(1) == "avx512"), r.stdout


# The flags the issue names for each command (issue #9's scope): the help must list them all.
REQUIRED_FLAGS = {
    "serve": ["--model", "--host", "--port", "--served-model-name", "--api-key", "--max-model-len",
              "--kv-cache-memory", "--max-running", "--max-step-tokens", "--max-queue", "--threads"],
    "chat": ["--model", "--temperature", "--top-p", "--top-k", "--min-p", "--repetition-penalty",
             "--presence-penalty", "--frequency-penalty", "--seed", "--max-tokens"],
    "bench --serving": ["--url", "--num-requests", "--max-running", "--input-len", "--output-len"],
}
HELP_LINE = re.compile(r"^  (--[a-z0-9-]+)( \S+)?  +\S", re.M)


def commands(deepinfer):
    r = run(deepinfer, ["--help"])
    assert r.returncode == 0, r.stderr
    names = re.findall(r"^  ([a-z-]+)  ", r.stdout, re.M)
    assert set(COMMANDS) <= set(names), r.stdout
    return [[name] for name in names] + [["bench", "--serving"], ["bench", "--context-sweep"]]


def test_every_help_lists_every_flag(deepinfer):
    for command in commands(deepinfer):
        name = " ".join(command)
        r = run(deepinfer, [*command, "--help"])
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout.startswith("usage: deepinfer " + command[0]), r.stdout
        flags = dict(HELP_LINE.findall(r.stdout))
        assert flags, (name, r.stdout)
        for required in REQUIRED_FLAGS.get(name, []):
            assert required in flags, (name, required, r.stdout)
        # Every flag listed is one the parser takes, with a value exactly when the help shows one:
        # the flag (and its placeholder as the value) is accepted or refused for its value, and the
        # parser then stops at the unknown flag that follows, so nothing runs.
        for flag, value in flags.items():
            args = [*command, flag] + ([value.strip()] if value else []) + ["--no-such-flag"]
            out = run(deepinfer, args)
            assert out.returncode != 0, (args, out.stdout)
            assert f"'{flag}'" not in out.stderr and "missing value" not in out.stderr, (args, out.stderr)
        bad = run(deepinfer, [*command, "--no-such-flag", "1"])
        assert bad.returncode != 0 and "'--no-such-flag'" in bad.stderr, (name, bad.stderr)
