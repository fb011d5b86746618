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

#include "../../fuzz_check.h"
#include "core/error.h"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using deepinfer::FuzzCheck;

const deepinfer::Tokenizer& FuzzTokenizer() {
  static const deepinfer::Tokenizer tokenizer =
      deepinfer::Tokenizer::FromFile(DEEPINFER_SOURCE_DIR "/data/tokenizer/tokenizer.json");
  return tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const deepinfer::Tokenizer& tokenizer = FuzzTokenizer();
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  const std::vector<int32_t> ids = tokenizer.Encode(input);
  for (const int32_t id : ids) FuzzCheck(id >= 0 && static_cast<size_t>(id) < tokenizer.size(), "id out of range");
  FuzzCheck(tokenizer.Decode(ids) == deepinfer::Utf8Lossy(input), "decode(encode(x)) != x");

  std::vector<int32_t> raw_ids(size / sizeof(int32_t));
  if (!raw_ids.empty()) std::memcpy(raw_ids.data(), data, raw_ids.size() * sizeof(int32_t));
  FuzzCheck(deepinfer::IsValidUtf8(tokenizer.Decode(raw_ids, size % 2 == 0)), "decode produced invalid UTF-8");

  if (deepinfer::IsValidUtf8(input)) {
    FuzzCheck(deepinfer::IsValidUtf8(deepinfer::EngramNormalize(input)), "normalizer produced invalid UTF-8");
  }
  return 0;
}
