// Added tokens (special tokens and the like) are cut out of the raw text before any
// pre-tokenization, following HF `AddedVocabulary`: leftmost-longest matching, first over the
// tokens marked `normalized: false`, then over the remaining gaps with the `normalized: true`
// ones (the loader only accepts files without a normalizer, so both see the raw text).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special;
  bool single_word;
  bool lstrip;
  bool rstrip;
  bool normalized;
};

class AddedTokenMatcher {
 public:
  struct Segment {
    std::string_view text;
    int32_t added_token_id;  // -1: ordinary text still to be pre-tokenized
  };

  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // Tiles `text` (valid UTF-8) into added-token segments and ordinary-text segments.
  std::vector<Segment> Split(std::string_view text) const;

 private:
  // A byte trie over the contents of one group of tokens.
  class Trie {
   public:
    void Insert(std::string_view content, int32_t token_index);
    // Longest token starting at `text[start]`: its index, or -1; `length` receives its size.
    int32_t LongestAt(std::string_view text, size_t start, size_t& length) const;

   private:
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;
      int32_t token_index = -1;
    };
    int32_t Child(int32_t node, uint8_t byte) const;
    std::vector<Node> nodes_{Node{}};
  };

  void SplitWith(const Trie& trie, std::string_view text, std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace deepinfer
