#!/usr/bin/env bash
# Redoes the whole training of the embedded default model (kjv-tiny) on CPU, from the Debian
# packages to the committed model directory and its evaluation. Every step resumes: rerun the
# same command after an interruption and it continues where it stopped.
#
#   tools/train/train_all.sh [WORK]      # WORK defaults to build/train
#
# Needs: the deepinfer build (for the chat encoder and the engine-side evaluation), Debian's
# bible-kjv + bible-kjv-text, and Python with torch / tokenizers / safetensors / sympy /
# matplotlib (installed into WORK/venv). The reference evaluation steps (golden rows, DSpark
# acceptance) also need the official reference package in REFERENCE (see tools/golden).
set -euo pipefail
cd "$(dirname "$0")/../.."
work="${1:-build/train}"
reference="${REFERENCE:-}"
model=tests/data/models/kjv-tiny
mkdir -p "$work"

tools/setup.sh
for p in bible-kjv bible-kjv-text; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { apt-get install -y -qq "$p" || sudo apt-get install -y -qq "$p"; }
done
if [ ! -x "$work/venv/bin/python" ]; then
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q "torch==2.15.*" "tokenizers==0.23.*" "safetensors==0.8.*" "sympy==1.14.*" \
    "numpy==2.4.*" "matplotlib==3.11.*" pillow
fi
py="$work/venv/bin/python"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build build -j2 --target deepinfer
cd tools/train
w="../../$work"
[ -f "$w/data.pt" ] || "$py" prepare.py --work "$w"
"$py" train.py --work "$w"
"$py" unlikelihood.py --work "$w"
"$py" dspark.py --work "$w"
"$py" export.py --work "$w" --out "../../$model"
"$py" make_eval_data.py --work "$w"
"$py" plot.py --work "$w"
"$py" evaluate.py perplexity --work "$w" --model "../../$model"
if [ -n "$reference" ]; then
  "$py" evaluate.py dspark --work "$w" --model "../../$model" --reference "$reference"
  (cd ../golden && "../../$work/venv/bin/python" make_trained_golden.py --reference "$reference" \
     --model "../../$model" --out "../../$model/golden")
fi
