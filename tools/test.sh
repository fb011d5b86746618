#!/usr/bin/env bash
# Builds deepinfer with -Werror and runs the whole test suite (CTest + GoogleTest), then the
# engine's load test and the hostile-input tests under sanitizers, then the libFuzzer targets for
# a bounded time (FUZZ_SECONDS each, default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
jobs="${JOBS:-2}"
# House style (.clang-format) is checked, not just suggested.
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_WERROR=ON > /dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

# The test suite again under AddressSanitizer + UBSan + LeakSanitizer: the hostile-input tests
# (CLI and GoogleTest), `deepinfer generate` on the default model, the engine's load test, memory
# budgets, aborts and prefix-cache sharing must all run clean. Left out, to keep CI in its time
# budget: the heaviest compute-bound tests, whose code paths the tests that stay cover (every
# execution mode of the golden models, the real-dimension slice, the 32-request and batch
# invariance sweeps, the 1000-token prefix and the context sweep).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_SANITIZE=ON \
      -DDEEPINFER_BUILD_BENCH=OFF > /dev/null
cmake --build build-asan -j"$jobs"
heavy='GoldenTest.EveryMode|RealDimensionSlice|RequestsProduceTheirAloneTokens|BatchInvariance|'
heavy+='AdoptedPrefixGivesBitIdenticalLogits/1000|bench_context_sweep$'
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -E "$heavy"

# Fuzzers: clang + libFuzzer + ASan/UBSan, bounded time, a fresh corpus each run (seeded with the
# committed valid files where there are some). A slow input (10 s) counts as a finding, and so does
# a single allocation of more than 512 MB in the model-file and request parsers.
fuzzers=(tokenizer_fuzz output_parser_fuzz safetensors_fuzz shard_index_fuzz model_config_fuzz tokenizer_json_fuzz
         chat_request_fuzz)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DDEEPINFER_FUZZ=ON \
      -DDEEPINFER_BUILD_TESTS=OFF -DDEEPINFER_BUILD_BENCH=OFF > /dev/null
cmake --build build-fuzz -j"$jobs" --target "${fuzzers[@]}"
seconds="${FUZZ_SECONDS:-30}"
corpus=$(mktemp -d)
# run_fuzzer BINARY SEEDS|- [libFuzzer flags...]
run_fuzzer() {
  local binary=$1 seeds=$2
  shift 2
  local dirs=("$corpus/$(basename "$binary")")
  mkdir -p "${dirs[0]}"
  [ "$seeds" = - ] || dirs+=("$seeds")
  "$binary" -max_total_time="$seconds" -timeout=10 "$@" "${dirs[@]}" 2>&1 | tail -n 2
}
run_fuzzer build-fuzz/tests/tokenizer/fuzz/tokenizer_fuzz - -max_len=4096
run_fuzzer build-fuzz/tests/chat/fuzz/output_parser_fuzz - -dict=tests/chat/fuzz/dsml.dict
run_fuzzer build-fuzz/tests/io/fuzz/safetensors_fuzz tests/io/fuzz/corpus/safetensors \
  -dict=tests/io/fuzz/safetensors.dict -malloc_limit_mb=512
run_fuzzer build-fuzz/tests/io/fuzz/shard_index_fuzz tests/io/fuzz/corpus/shard_index \
  -dict=tests/io/fuzz/shard_index.dict -malloc_limit_mb=512
run_fuzzer build-fuzz/tests/io/fuzz/model_config_fuzz tests/io/fuzz/corpus/model_config \
  -dict=tests/io/fuzz/model_config.dict -malloc_limit_mb=512
run_fuzzer build-fuzz/tests/tokenizer/fuzz/tokenizer_json_fuzz tests/tokenizer/fuzz/corpus/tokenizer_json \
  -dict=tests/tokenizer/fuzz/tokenizer_json.dict -malloc_limit_mb=512
run_fuzzer build-fuzz/tests/chat/fuzz/chat_request_fuzz tests/chat/fuzz/corpus/chat_request \
  -dict=tests/chat/fuzz/chat_request.dict -malloc_limit_mb=512
rm -rf "$corpus"
echo "fuzzers: no finding in ${seconds}s each (${#fuzzers[@]} targets)"
