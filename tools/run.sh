#!/usr/bin/env bash
# Builds deepinfer and runs `deepinfer generate` on the embedded tiny V4.1 model.
# Extra arguments are passed to `deepinfer generate` (default: a short greedy continuation).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_BUILD_TESTS=OFF -DDEEPINFER_BUILD_BENCH=OFF > /dev/null
cmake --build build-release -j"${JOBS:-2}" --target deepinfer
if (($#)); then
  exec build-release/src/cli/deepinfer generate "$@"
fi
exec build-release/src/cli/deepinfer generate --prompt-ids 0,17,42,99,7 --max-tokens 16 --show-ids
