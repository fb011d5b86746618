#!/usr/bin/env bash
# Builds deepinfer with -Werror and runs the whole test suite (CTest + GoogleTest), then the
# engine's load test under sanitizers, then the libFuzzer targets for a bounded time
# (FUZZ_SECONDS each, default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
jobs="${JOBS:-2}"
# House style (.clang-format) is checked, not just suggested.
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_WERROR=ON > /dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

# The serving engine under AddressSanitizer + UBSan: the load test (256 requests, random aborts,
# preemption), memory budgets and prefix-cache sharing must run clean, with no leak.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_SANITIZE=ON \
      -DDEEPINFER_BUILD_BENCH=OFF > /dev/null
cmake --build build-asan -j"$jobs" --target engine_tests
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  build-asan/tests/engine_tests --gtest_brief=1 \
  --gtest_filter='EngineTest.LoadTest*:EngineTest.Abort*:EngineTest.MemoryBudget*:EngineTest.ARequest*'

# Fuzzers: clang + libFuzzer + ASan/UBSan, bounded time, fresh corpus each run.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DDEEPINFER_FUZZ=ON \
      -DDEEPINFER_BUILD_TESTS=OFF -DDEEPINFER_BUILD_BENCH=OFF > /dev/null
cmake --build build-fuzz -j"$jobs" --target tokenizer_fuzz output_parser_fuzz
seconds="${FUZZ_SECONDS:-30}"
corpus=$(mktemp -d)
mkdir -p "$corpus/tokenizer" "$corpus/parser"
build-fuzz/tests/tokenizer/fuzz/tokenizer_fuzz -max_total_time="$seconds" -max_len=4096 "$corpus/tokenizer" 2>&1 | tail -n 2
build-fuzz/tests/chat/fuzz/output_parser_fuzz -max_total_time="$seconds" -dict=tests/chat/fuzz/dsml.dict \
  "$corpus/parser" 2>&1 | tail -n 2
rm -rf "$corpus"
echo "fuzzers: no crash in ${seconds}s each"
