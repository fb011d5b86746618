#!/usr/bin/env bash
# Builds deepinfer with -Werror and runs the whole test suite (CTest + GoogleTest), the server's
# end-to-end suite (pytest: the official openai client, raw HTTP, schemathesis, a soak, headless
# Chromium, the terminal chat), the engine and server tests under ASan + UBSan and the server's
# concurrency tests under TSan, then the libFuzzer targets for a bounded time (FUZZ_SECONDS
# each, default 30). Each part prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
jobs="${JOBS:-2}"
part_start=$SECONDS
part() {  # ends the previous part: its name and time
  echo "test.sh: $1 took $((SECONDS - part_start)) s"
  part_start=$SECONDS
}

# House style (.clang-format) is checked, not just suggested.
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_WERROR=ON > /dev/null
cmake --build build -j"$jobs"
part "build"
ctest --test-dir build --output-on-failure -j"$jobs"
part "ctest"

# The server end to end. PyPI packages (pinned) go into a venv made here; it sees Debian's
# python3-selenium (--system-site-packages) for the browser test.
venv=build/venv-test
requirements=tests/server/requirements.txt
if ! cmp -s "$requirements" "$venv/requirements.txt"; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$venv/requirements.txt"
fi
part "server test venv"
"$venv/bin/python" -m pytest tests/server -q -p no:cacheprovider -rs --durations=8 \
  --deepinfer build/src/cli/deepinfer --artifacts build/server-test
cat build/server-test/soak.txt
part "server pytest suite"

# The serving engine and the server under AddressSanitizer + UBSan: the load test (256
# requests, random aborts, preemption), memory budgets and prefix-cache sharing, and the
# server's tests (concurrent streams with clients leaving, malformed requests) must run clean,
# with no leak.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_SANITIZE=ON \
      -DDEEPINFER_BUILD_BENCH=OFF > /dev/null
cmake --build build-asan -j"$jobs" --target engine_tests server_tests
part "ASan build"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
build-asan/tests/engine_tests --gtest_brief=1 \
  --gtest_filter='EngineTest.LoadTest*:EngineTest.Abort*:EngineTest.MemoryBudget*:EngineTest.ARequest*'
build-asan/tests/server_tests --gtest_brief=1
unset ASAN_OPTIONS UBSAN_OPTIONS
part "ASan + UBSan runs"

# The server's threads under ThreadSanitizer: the engine loop and concurrent HTTP streams.
# -O1 without debug info keeps this build short.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DDEEPINFER_TSAN=ON \
      -DDEEPINFER_BUILD_BENCH=OFF > /dev/null
cmake --build build-tsan -j"$jobs" --target server_tests
part "TSan build"
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/server_tests --gtest_brief=1 \
  --gtest_filter='HttpServer.*:EngineLoopTest.*'
part "TSan run"

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
part "fuzzers"
