#!/usr/bin/env bash
# `deepinfer perplexity` honours --isa, --kernel-plan and --weight-layout: the AVX2 level, every
# kernel plan this CPU runs and both weight layouts print the default run's numbers, digit for
# digit (the SIMD kernels compute the same bits; the scalar oracle agrees with them only to fp32
# rounding, and over 600 scored tokens that moves the fourth digit, so it is not compared).
# perplexity_flags.sh DEEPINFER TEXT_FILE
set -euo pipefail
deepinfer=$1
args=(perplexity --file "$2" --context 64 --stride 24)
default=$("$deepinfer" "${args[@]}")
check() {  # flags...
  local out
  out=$("$deepinfer" "${args[@]}" "$@")
  if [ "$out" != "$default" ]; then
    printf '%s\n' "perplexity $* printed:" "$out" "the default run:" "$default"
    exit 1
  fi
  echo "$*: the default run's numbers"
}
check --weight-layout in-place
cpu=$("$deepinfer" --version | sed -n 's/.*this CPU: //p')
[ "$cpu" = avx512 ] || exit 0
check --isa avx2
check --kernel-plan fma
if "$deepinfer" --version | grep -q "kernel plan: fma "; then
  exit 0  # no AVX512-BF16: the dot plans are refused (kernel_plan_flag.sh checks that)
fi
check --kernel-plan fp8-gemv-dot
check --kernel-plan quantized-dot --weight-layout interleaved
