#!/usr/bin/env bash
# `deepinfer generate` honours --isa. isa_flag.sh DEEPINFER scalar: at scalar it gives the tokens
# of the default (best) level (the SIMD levels share their bits; the scalar oracle agrees with them
# to fp32 rounding, which leaves these greedy tokens as they are). isa_flag.sh
# DEEPINFER above: a level above this CPU's is refused with an error naming the flag; on a CPU at
# the top level there is none, and the test is skipped (exit 77).
set -euo pipefail
deepinfer=$1
mode=$2
args=(generate --prompt-ids 0,17,42,99 --max-tokens 8 --show-ids)
if [ "$mode" = scalar ]; then
  best=$("$deepinfer" "${args[@]}")
  scalar=$("$deepinfer" "${args[@]}" --isa scalar)
  if [ "$best" != "$scalar" ]; then
    printf '%s\n' "--isa scalar gave other tokens:" "$scalar" "the default level gave:" "$best"
    exit 1
  fi
  echo "--isa scalar: the default level's tokens"
  exit 0
fi
cpu=$("$deepinfer" --version | sed -n 's/.*this CPU: //p')
case $cpu in
  scalar) above=avx2 ;;
  avx2) above=avx512 ;;
  *)
    echo "this CPU runs $cpu, the top level: no level above it to refuse"
    exit 77
    ;;
esac
if out=$("$deepinfer" "${args[@]}" --isa "$above" 2>&1); then
  echo "--isa $above ran on a CPU that supports at most $cpu"
  exit 1
fi
expected="error: --isa: SIMD level $above requested but this CPU supports at most $cpu"
if [ "$out" != "$expected" ]; then
  printf '%s\n' "got:" "$out" "expected:" "$expected"
  exit 1
fi
echo "--isa $above on a $cpu CPU: refused"
