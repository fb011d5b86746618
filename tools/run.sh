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
# The opening of Revelation, the book the model never saw in training.
prompt=$'Revelation 1\nThe Revelation of Jesus Christ, which God gave unto him, to'
echo "== deepinfer generate --prompt \"${prompt//$'\n'/\\n}\""
"$deepinfer" generate --prompt "$prompt" --max-tokens 48
echo
question="Who are you?"
echo "== deepinfer generate --chat --prompt \"$question\""
"$deepinfer" generate --chat --prompt "$question" --max-tokens 64
