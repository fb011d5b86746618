// The Engram module of DeepSeek-V4.1 hashes token n-grams over a "compressed" vocabulary in
// which tokens that differ only by case, accents, Unicode compatibility form or surrounding
// whitespace share one id. This reproduces the reference `engram.py` construction exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer {

struct EngramTokenMap {
  std::vector<int32_t> compressed_id;  // indexed by token id, size == tokenizer.size()
  int64_t compressed_vocab_size;
};

// The reference normalizer chain as HF `tokenizers` applies it to valid UTF-8: NFKC, NFD,
// strip combining marks, lowercase, collapse [ \t\r\n]+ to one space, keep a lone space, strip
// surrounding whitespace.
std::string EngramNormalize(std::string_view text);

EngramTokenMap BuildEngramTokenMap(const Tokenizer& tokenizer);

}  // namespace deepinfer
