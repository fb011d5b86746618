#!/bin/bash
# Compares the SIMD linear kernels of a git revision (A) with the working tree's (B), timed in one
# process in alternating blocks of calls (bench/kernel_ab.cc), so that a noisy host's minutes fall
# on both alike. The baseline files compile against the working tree's headers: the tool measures
# changes to src/kernels/cpu/linear_avx2.cc and linear_avx512.cc.
#   tools/kernel_ab.sh REV [kernel_ab flags]     e.g. tools/kernel_ab.sh HEAD --format fp4 --n 2304 --k 5120
# Release build (as tools/run.sh) in build-kernel-ab/; build/bench/kernel_ab --help lists the flags.
set -euo pipefail
if [[ $# -lt 1 || $1 == -* ]]; then
  echo "usage: tools/kernel_ab.sh REV [kernel_ab flags]" >&2
  exit 2
fi
rev=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-kernel-ab
baseline=$build/baseline
mkdir -p "$baseline"
for file in linear_avx2.cc linear_avx512.cc; do
  if ! git -C "$root" show "$rev:src/kernels/cpu/$file" > "$baseline/$file.new"; then
    echo "kernel_ab.sh: revision '$rev' has no src/kernels/cpu/$file" >&2
    exit 2
  fi
  # Unchanged baselines keep their timestamps, so a second run rebuilds nothing.
  if cmp -s "$baseline/$file.new" "$baseline/$file"; then rm "$baseline/$file.new"; else mv "$baseline/$file.new" "$baseline/$file"; fi
done
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_BUILD_TESTS=OFF \
      -DKERNEL_AB_BASELINE_DIR="$baseline" > /dev/null
cmake --build "$build" -j"${JOBS:-2}" --target kernel_ab
exec "$build/bench/kernel_ab" "$@"
