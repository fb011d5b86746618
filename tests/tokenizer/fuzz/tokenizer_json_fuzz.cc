// libFuzzer target: arbitrary text as tokenizer.json. Loading must end in a tokenizer or one
// deepinfer::Error naming the file, within bounded memory (ids are bounded and dense); a loaded
// tokenizer must encode and decode without crashing and keep its ids in range.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "../../fuzz_check.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using deepinfer::FuzzCheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const deepinfer::Tokenizer tokenizer = deepinfer::Tokenizer::FromJsonText(text, "tokenizer.json");
    FuzzCheck(tokenizer.size() <= 2 * size + 1024, "id tables larger than the file can describe");
    const std::vector<int32_t> ids = tokenizer.Encode("ab 12 <think>\xff x");
    for (const int32_t id : ids) FuzzCheck(id >= 0 && static_cast<size_t>(id) < tokenizer.size(), "id out of range");
    std::vector<int32_t> all;
    for (size_t id = 0; id < tokenizer.size() && id < 4096; ++id) all.push_back(static_cast<int32_t>(id));
    FuzzCheck(deepinfer::IsValidUtf8(tokenizer.Decode(all)), "decode produced invalid UTF-8");
  } catch (const deepinfer::Error& e) {
    FuzzCheck(std::string_view(e.what()).find('\n') == std::string_view::npos, "a multi-line error");
  }
  return 0;
}
