#!/usr/bin/env python3
"""Structured output end to end: for every schema in tests/data/structured/schemas, `deepinfer
generate --json-schema` samples N choices (one batch, --n) at temperature 1 on --model (default:
the embedded default model), and every one must finish on its own (finish_reason "stop", not
"length"), parse as JSON and validate with python3-jsonschema (the schema's own draft, format
checking on).

CTest runs it on the random golden model tiny-a. The trained default (kjv-tiny) is the wrong
model for this: it writes King James prose into a free string at temperature 1 and seldom
closes it, so unbounded strings run to the token limit. Nothing here knows the model's
vocabulary: the prompt is "Answer with JSON." when the vocabulary holds its ids, else the BOS id
alone (tiny-a knows 512 ids).

Termination. An untrained model writes a string until it happens to pick a token with a quote
(1 or 2 of 512 for the tiny model), so a free string runs to hundreds of tokens. Two things keep
samples short without touching validity: the schemas bound the strings and arrays that a
document repeats many times (maxLength / maxItems), as an application's schema would, and the
requests add an OpenAI logit_bias (+3 by default, --quote-bias) to the single-quote token, found by
tokenizing '"'. The bias changes which valid document comes out, never whether it is valid: the
mask is applied after the bias, so a forbidden token stays forbidden. Schemas with unbounded
strings, member names and nesting (flat ones, additionalProperties, {}, {"type": "object"}) are
kept: they must work too. A sample that reaches --max-tokens is a failure.

usage: schema_samples_test.py DEEPINFER SOURCE_DIR [--model DIR] [--samples N] [--schemas GLOB] [--jobs J]
"""
import argparse
import concurrent.futures
import datetime
import glob
import json
import os
import re
import subprocess
import sys
import time

try:
    import jsonschema
except ImportError:
    sys.exit("schema_samples_test: needs the Debian package python3-jsonschema (tools/setup.sh installs it)")


def run(cmd, check_ok=False):
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0 and not check_ok:
        raise RuntimeError("%s failed (%d):\n%s%s" % (" ".join(cmd), result.returncode, result.stdout, result.stderr))
    return result


def model_flags(deepinfer, model, quote_bias):
    """Flags for the model: which one (--model, when given), a prompt it can read (the text when
    every id is inside the model's vocabulary, else the begin-of-sentence id alone) and the quote
    token's bias."""
    chosen = ["--model", model] if model else []
    inspect = run([deepinfer, "inspect", *chosen]).stdout
    model_dir = re.search(r"^model: (.*)$", inspect, re.M).group(1)
    vocab = int(re.search(r"^vocab (\d+),", inspect, re.M).group(1))

    def encode(text):
        return [int(i) for i in run([deepinfer, "tokenize", "--model", model_dir, "--text", text]).stdout.split()]

    text = "Answer with JSON."
    ids = encode(text)
    flags = ["--prompt", text] if ids and max(ids) < vocab else ["--prompt-ids", "0"]
    description = "%s (vocabulary %d), prompt %s" % (model_dir, vocab, " ".join(flags[1:]))
    flags = chosen + flags
    quote = encode('"')
    if quote_bias and len(quote) == 1 and quote[0] < vocab:
        flags += ["--logit-bias", "%d:%g" % (quote[0], quote_bias)]
        description += ", logit_bias %+g on the quote token %d" % (quote_bias, quote[0])
    return flags, description


RFC3339_TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$")


def format_checker(validator_class):
    """The draft's own format checker (FormatChecker() would mix in draft 3's "time", HH:MM:SS),
    with RFC 3339 "time" and "date-time" checked here when rfc3339-validator is missing."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(validator_class.FORMAT_CHECKER.checkers)

    def is_time(value):
        return not isinstance(value, str) or bool(RFC3339_TIME.match(value))

    def is_date_time(value):
        if not isinstance(value, str):
            return True
        date, sep, time_part = value.partition("T") if "T" in value else value.partition("t")
        try:
            datetime.date.fromisoformat(date)
        except ValueError:
            return False
        return bool(sep) and len(date) == 10 and bool(RFC3339_TIME.match(time_part))

    if "time" not in checker.checkers:
        checker.checks("time")(is_time)
    if "date-time" not in checker.checkers:
        checker.checks("date-time")(is_date_time)
    return checker


def check_schema(args, prompt_flags, index, path):
    """(summary line, failures, valid count) for one schema."""
    name = os.path.basename(path)
    schema = json.load(open(path, encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema, format_checker=format_checker(validator_class))
    cmd = [args.deepinfer, "generate", *prompt_flags, "--json-schema", path, "--temperature", "1",
           "--seed", str(1000 * index), "--n", str(args.samples), "--max-tokens", str(args.max_tokens),
           "--jsonl", "--threads", "1"]
    start = time.time()
    result = run(cmd, check_ok=True)
    seconds = time.time() - start
    # One JSON object a line; split on "\n" only (the texts may hold U+2028 and other line breaks).
    lines = [json.loads(line) for line in result.stdout.split("\n") if line.strip()]
    if result.returncode != 0 or len(lines) != args.samples:
        return ("%-36s generate failed" % name, ["%s: generate exited %d with %d choices\n%s" % (
            name, result.returncode, len(lines), result.stderr[-2000:])], 0)
    failures, tokens, valid = [], [], 0
    for line in lines:
        text = line["text"]
        tokens.append(line["tokens"])
        if line["finish_reason"] != "stop":
            failures.append("%s choice %d: finish_reason %s %s after %d tokens, ending %r" % (
                name, line["index"], line["finish_reason"], line.get("error", ""), line["tokens"], text[-200:]))
            continue
        try:
            validator.validate(json.loads(text))
        except (ValueError, jsonschema.ValidationError) as error:
            failures.append("%s choice %d: %s\n%r" % (name, line["index"], str(error).splitlines()[0], text))
            continue
        valid += 1
    summary = "%-36s %2d/%d valid, tokens %4d..%4d (mean %4d), %.1f s" % (
        name, valid, len(lines), min(tokens), max(tokens), sum(tokens) / len(tokens), seconds)
    return summary, failures, valid


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("deepinfer")
    parser.add_argument("source_dir")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=1500)
    parser.add_argument("--schemas", default="*.json")
    parser.add_argument("--quote-bias", type=float, default=3.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--model", help="model directory (default: the embedded default model)")
    args = parser.parse_args()
    prompt_flags, description = model_flags(args.deepinfer, args.model, args.quote_bias)
    print("model:", description)
    schemas = sorted(glob.glob(os.path.join(args.source_dir, "tests", "data", "structured", "schemas", args.schemas)))
    failures = []
    valid = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for summary, schema_failures, schema_valid in pool.map(
                lambda item: check_schema(args, prompt_flags, *item), enumerate(schemas)):
            print(summary, flush=True)
            failures += schema_failures
            valid += schema_valid
    total = len(schemas) * args.samples
    print("%d schemas x %d samples: %d/%d valid" % (len(schemas), args.samples, valid, total))
    for failure in failures:
        print("FAIL", failure)
    enough = args.schemas != "*.json" or len(schemas) >= 40
    return 0 if not failures and valid == total and enough else 1


if __name__ == "__main__":
    sys.exit(main())
