#!/usr/bin/env bash
# `deepinfer generate` honours --kernel-plan: every plan this CPU can run gives the logits of the
# default plan bit for bit (the kernels compute the canonical operations whichever instruction
# runs them), and the in-place and interleaved weight layouts of each plan agree too. A plan that
# needs AVX512-BF16 on a CPU without it, a bad value, and a plan with the non-AVX-512 kernels are
# refused with an error naming the flag. kernel_plan_flag.sh DEEPINFER SCRATCH_DIR
set -euo pipefail
deepinfer=$1
dir=$2
mkdir -p "$dir"
# 40 prompt tokens: the prefill runs the GEMM panels, the decode steps the GEMV tiles.
args=(generate --prompt-ids "$(seq -s, 3 7 276)" --max-tokens 6)

expect_error() { bash "$(dirname "$0")/expect_error.sh" "$@"; }  # REGEX COMMAND...

expect_error "^error: --kernel-plan: expected fma, fp8-gemv-dot or quantized-dot, got 'dot'$" \
  "$deepinfer" "${args[@]}" --kernel-plan dot
expect_error "^error: --kernel-plan: only the avx512 kernels have a plan to choose; this run uses isa scalar$" \
  "$deepinfer" "${args[@]}" --kernel-plan fma --isa scalar

cpu=$("$deepinfer" --version | sed -n 's/.*this CPU: //p')
if [ "$cpu" != avx512 ]; then
  expect_error "^error: --kernel-plan: only the avx512 kernels have a plan to choose; this run uses isa $cpu$" \
    "$deepinfer" "${args[@]}" --kernel-plan fma
  echo "a $cpu CPU: no avx512 kernels, every --kernel-plan refused"
  exit 0
fi

"$deepinfer" "${args[@]}" --dump-logits "$dir/default.npy" > /dev/null
ran=0
for plan in fma fp8-gemv-dot quantized-dot; do
  for layout in in-place interleaved; do
    if ! out=$("$deepinfer" "${args[@]}" --kernel-plan $plan --weight-layout $layout \
      --dump-logits "$dir/$plan-$layout.npy" 2>&1 > /dev/null); then
      case $out in
        "error: --kernel-plan: kernel plan $plan needs AVX512-BF16, which this CPU lacks (its plan: fma)" | \
          "error: --weight-layout interleaved: no kernel of kernel plan $plan on this CPU reads the interleaved copy"*)
          echo "$plan / $layout: refused ($out)"
          continue
          ;;
      esac
      printf '%s\n' "--kernel-plan $plan --weight-layout $layout failed:" "$out"
      exit 1
    fi
    if ! cmp -s "$dir/default.npy" "$dir/$plan-$layout.npy"; then
      echo "--kernel-plan $plan --weight-layout $layout: logits differ from the default plan's"
      exit 1
    fi
    echo "$plan / $layout: the default plan's logits, bit for bit"
    ran=$((ran + 1))
  done
done
[ "$ran" -ge 1 ]
