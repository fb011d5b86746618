// Byte-level BPE as HF `tokenizers` runs it: a word's bytes start as one symbol each and the
// adjacent pair with the lowest merge rank (leftmost on ties) is merged until none applies.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"

namespace deepinfer {

class BpeModel {
 public:
  // `vocab` maps byte-level token text to ids; `merges` lists token-text pairs by rank.
  BpeModel(const std::unordered_map<std::string, int32_t>& vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           const ByteLevelAlphabet& alphabet, const std::string& origin);
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one pre-tokenized word, given as raw (not byte-level mapped) bytes.
  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  struct WordCache;

  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void MergeSymbols(std::string_view word, std::vector<int32_t>& out) const;

  // Vocabulary id of each single byte's alphabet character, -1 when the vocabulary lacks it
  // (HF then drops the byte, as this file format has no unk token here).
  std::array<int32_t, 256> byte_token_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  // Only consulted when the file sets `ignore_merges`: whole words found in the vocabulary.
  std::unordered_map<std::string, int32_t> whole_word_ids_;
  bool ignore_merges_;
  const ByteLevelAlphabet* alphabet_;
  // Results per distinct word; thread-safe and bounded, so Encode stays const and shareable.
  std::unique_ptr<WordCache> cache_;
};

}  // namespace deepinfer
