// Size limits shared by the layers that read a model's files (config, tokenizer): one value,
// so that a vocabulary the config accepts is one the tokenizer accepts too.
#pragma once

#include <cstdint>

namespace deepinfer {

// Token ids are below 2^24 (16,777,216; DeepSeek-V4.1 uses 129,280). A larger id in a config or
// tokenizer.json is rejected before anything is sized by it.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

}  // namespace deepinfer
