// A byte-level BPE tokenizer read from an HF `tokenizer.json`, reproducing HF `tokenizers`:
// `Encode` equals `Tokenizer.encode(text, add_special_tokens=False).ids` and `Decode` equals
// `Tokenizer.decode(ids, skip_special_tokens=...)`. Supported files: BPE model, no (or empty)
// normalizer, a pre-tokenizer of regex `Split` steps (behavior Isolated) followed by
// ByteLevel(use_regex=false), and a ByteLevel decoder -- the DeepSeek V3/V4 layout.
//
// Input that is not valid UTF-8 is first repaired the way Python's
// `bytes.decode("utf-8", "replace")` does it (each maximal invalid subsequence becomes
// U+FFFD), so Encode(bytes) == HF encode(bytes.decode("utf-8", "replace")).
//
// A Tokenizer is immutable after loading and safe to use from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model_directory.h"
#include "core/regular_file.h"

namespace deepinfer {

class Tokenizer {
 public:
  // Reads a regular file of at most 16 MiB (core/regular_file.h).
  static Tokenizer FromFile(const std::string& path);
  static Tokenizer FromFile(const FileHandle& file);
  // `origin` names the source in error messages (usually the file path).
  static Tokenizer FromJsonText(std::string_view json, const std::string& origin);
  // A model directory's tokenizer: its tokenizer.json, with the prompt rule of its
  // tokenizer_config.json when it has one (see EncodeTextPrompt); nullopt when the directory has
  // no tokenizer.json.
  static std::optional<Tokenizer> FromModelDirectory(const ModelDirectory& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Number of ids, added tokens included: the largest id plus one (HF `len(tokenizer)`).
  size_t size() const;

  std::vector<int32_t> Encode(std::string_view text) const;
  // A raw text prompt (completions, `generate --prompt`) as HF's `tokenizer(text)` encodes it:
  // the BOS token first when tokenizer_config.json sets `add_bos_token` (the released DeepSeek
  // files do; without the file or the field nothing is added), then Encode(text). Rendered chat
  // prompts carry their own BOS and use Encode.
  std::vector<int32_t> EncodeTextPrompt(std::string_view text) const;
  // The id EncodeTextPrompt puts first, if any.
  std::optional<int32_t> prompt_bos() const;

  // Ids that name no token are skipped, as HF does. The result is valid UTF-8: token bytes
  // that do not form valid UTF-8 become U+FFFD per maximal invalid subsequence.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The raw bytes one token stands for (possibly not valid UTF-8: a piece of a character), as
  // OpenAI's logprobs `bytes` report them; "" for ids that name no token.
  std::string TokenBytes(int32_t id) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The stored token text (byte-level alphabet for vocabulary tokens); throws for unknown ids.
  std::string IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
