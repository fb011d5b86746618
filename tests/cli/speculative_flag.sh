#!/usr/bin/env bash
# `deepinfer generate --speculative dspark` on the default model (it has a DSpark head): greedy
# tokens equal the plain run's at the confidence policy and at a fixed full block, the summary
# reports the verify steps, --dump-draft writes [drafts x block, vocab], and bad values and
# flags without --speculative are refused with an error naming the flag.
set -euo pipefail
deepinfer=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(generate --prompt-ids 0,17,42,99,7,300,12 --max-tokens 40 --show-ids --ignore-eos)

expect_error() { bash "$(dirname "$0")/expect_error.sh" "$@"; }  # REGEX COMMAND...
expect_error "^error: --speculative: expected dspark or off, got 'eagle'$" "$deepinfer" "${args[@]}" --speculative eagle
expect_error "^error: generate: --dump-draft needs --speculative dspark$" "$deepinfer" "${args[@]}" --dump-draft "$out/d.npy"
expect_error "^error: generate: --speculative-length needs --speculative dspark$" "$deepinfer" "${args[@]}" --speculative-length 3
expect_error "^error: speculative length must be 0 \(the confidence policy\) or 1\.\.5 \(the draft block\), got 9$" \
  "$deepinfer" "${args[@]}" --speculative dspark --speculative-length 9

plain=$("$deepinfer" "${args[@]}")
for length in 0 5; do
  spec=$("$deepinfer" "${args[@]}" --speculative dspark --speculative-length $length --dump-draft "$out/d.npy" 2>"$out/err")
  if [ "$spec" != "$plain" ]; then
    printf '%s\n' "--speculative dspark --speculative-length $length gave other tokens:" "$spec" "plain:" "$plain"
    exit 1
  fi
  grep -q "^speculative (DSpark): [1-9][0-9]* verify steps, mean accepted length" "$out/err" || {
    echo "no speculation summary:"; cat "$out/err"; exit 1; }
  # A v1 .npy header: the shape is (drafts * 5, 4096).
  header=$(head -c 128 "$out/d.npy" | tr -d '\0')
  [[ "$header" =~ \'shape\':\ \(([0-9]+),\ 4096\) ]] || { echo "bad --dump-draft header: $header"; exit 1; }
  (( ${BASH_REMATCH[1]} % 5 == 0 && ${BASH_REMATCH[1]} > 0 )) || { echo "draft rows ${BASH_REMATCH[1]}"; exit 1; }
  echo "length $length: $(cat "$out/err")"
done
