#!/usr/bin/env bash
# Builds deepinfer and runs the embedded default model (kjv-tiny, trained on the King James Bible
# and a generated chat set; tools/train/): a greedy continuation of a KJV-style prompt, then one
# chat answer. Extra arguments are passed to `deepinfer generate` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_BUILD_TESTS=OFF -DDEEPINFER_BUILD_BENCH=OFF > /dev/null
cmake --build build-release -j"${JOBS:-2}" --target deepinfer
deepinfer=build-release/src/cli/deepinfer
if (($#)); then
  exec "$deepinfer" generate "$@"
fi
prompt="And the LORD spake unto Moses, saying,"
echo "== deepinfer generate --prompt \"$prompt\""
"$deepinfer" generate --prompt "$prompt" --max-tokens 48
echo
question="What is 12 plus 30?"
echo "== deepinfer generate --chat --prompt \"$question\""
"$deepinfer" generate --chat --prompt "$question" --max-tokens 96
