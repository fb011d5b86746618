#!/usr/bin/env bash
# `deepinfer generate` honours --weight-layout: the interleaved copy gives the tokens of the
# in-place weights (the kernels compute the same bits from either), a bad value and an
# interleaved layout that no kernel at the chosen --isa reads are refused with an error naming the
# flag. Where this CPU has no kernel that reads the copy (no AVX512-BF16), `interleaved` must be
# refused at the default level too.
set -euo pipefail
deepinfer=$1
args=(generate --prompt-ids 0,17,42,99 --max-tokens 8 --show-ids)

expect_error() { bash "$(dirname "$0")/expect_error.sh" "$@"; }  # REGEX COMMAND...

expect_error "^error: --weight-layout: expected auto, in-place or interleaved, got 'packed'$" \
  "$deepinfer" "${args[@]}" --weight-layout packed
expect_error "^error: --weight-layout interleaved: no kernel at isa scalar on this CPU reads the interleaved copy \(it needs AVX-512 with AVX512-BF16\)$" \
  "$deepinfer" "${args[@]}" --weight-layout interleaved --isa scalar

in_place=$("$deepinfer" "${args[@]}" --weight-layout in-place)
default=$("$deepinfer" "${args[@]}")
if [ "$in_place" != "$default" ]; then
  printf '%s\n' "the default layout gave other tokens:" "$default" "in place:" "$in_place"
  exit 1
fi
if interleaved=$("$deepinfer" "${args[@]}" --weight-layout interleaved 2>&1); then
  if [ "$interleaved" != "$in_place" ]; then
    printf '%s\n' "--weight-layout interleaved gave other tokens:" "$interleaved" "in place:" "$in_place"
    exit 1
  fi
  echo "--weight-layout interleaved: the in-place tokens"
else
  cpu=$("$deepinfer" --version | sed -n 's/.*this CPU: //p')
  expected="error: --weight-layout interleaved: no kernel at isa $cpu on this CPU reads the interleaved copy (it needs AVX-512 with AVX512-BF16)"
  if [ "$cpu" = avx512 ]; then  # AVX-512 without AVX512-BF16: the fma plan
    expected="error: --weight-layout interleaved: no kernel of kernel plan fma on this CPU reads the interleaved copy (the fp8-gemv-dot and quantized-dot plans do, with AVX512-BF16)"
  fi
  if [ "$interleaved" != "$expected" ]; then
    printf '%s\n' "got:" "$interleaved" "expected:" "$expected"
    exit 1
  fi
  echo "--weight-layout interleaved on a $cpu CPU without a kernel that reads it: refused"
fi
