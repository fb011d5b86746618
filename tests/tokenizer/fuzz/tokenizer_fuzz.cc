// libFuzzer target: arbitrary bytes must encode and decode without crashing, decoding the
// encoding must give back the input (with invalid UTF-8 repaired to U+FFFD), and arbitrary ids
// must decode to valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const deepinfer::Tokenizer& FuzzTokenizer() {
  static const deepinfer::Tokenizer tokenizer =
      deepinfer::Tokenizer::FromFile(DEEPINFER_SOURCE_DIR "/data/tokenizer/tokenizer.json");
  return tokenizer;
}

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const deepinfer::Tokenizer& tokenizer = FuzzTokenizer();
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  const std::vector<int32_t> ids = tokenizer.Encode(input);
  for (const int32_t id : ids) Require(id >= 0 && static_cast<size_t>(id) < tokenizer.size(), "id out of range");
  Require(tokenizer.Decode(ids) == deepinfer::Utf8Lossy(input), "decode(encode(x)) != x");

  std::vector<int32_t> raw_ids(size / sizeof(int32_t));
  if (!raw_ids.empty()) std::memcpy(raw_ids.data(), data, raw_ids.size() * sizeof(int32_t));
  Require(deepinfer::IsValidUtf8(tokenizer.Decode(raw_ids, size % 2 == 0)), "decode produced invalid UTF-8");

  if (deepinfer::IsValidUtf8(input)) {
    Require(deepinfer::IsValidUtf8(deepinfer::EngramNormalize(input)), "normalizer produced invalid UTF-8");
  }
  return 0;
}
