"""`deepinfer chat` with a conversation piped into it, and the CLI's --version and --help."""

import re
import subprocess

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
    r = run(deepinfer, ["chat"], "hi\n")
    assert r.returncode == 1
    assert "does not cover its tokenizer" in r.stderr


def test_version(deepinfer):
    r = run(deepinfer, ["--version"])
    assert r.returncode == 0
    assert re.search(r"^deepinfer \d+\.\d+\.\d+$", r.stdout, re.M), r.stdout
    assert re.search(r"^commit   [0-9a-f]{7,}", r.stdout, re.M), r.stdout
    assert re.search(r"^isa      compiled: scalar, avx2, avx512; this CPU: (scalar|avx2|avx512)$", r.stdout, re.M)


def test_every_help_lists_flags_the_command_accepts(deepinfer):
    for command in COMMANDS:
        r = run(deepinfer, [command, "--help"])
        assert r.returncode == 0, (command, r.stderr)
        assert r.stdout.startswith("usage: deepinfer " + command), r.stdout
        flags = set(re.findall(r"^  (--[a-z0-9-]+)", r.stdout, re.M))
        assert flags, (command, r.stdout)
        # Every flag the help lists is one the parser knows; an unknown one is refused by name.
        for flag in flags:
            out = run(deepinfer, [command, flag, "x", "--help"])
            assert "unknown argument" not in out.stderr, (command, flag, out.stderr)
        bad = run(deepinfer, [command, "--no-such-flag", "1"])
        assert bad.returncode != 0 and "--no-such-flag" in bad.stderr, (command, bad.stderr)
