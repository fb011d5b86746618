// The tokenizer's vocabulary as constrained decoding sees it: every token id's bytes, and a
// trie over the bytes of the text tokens, laid out in preorder so a walk can skip a whole
// subtree (every token sharing a refused prefix) with one jump.
//
// Text tokens are the ids that decode to bytes: vocabulary tokens and non-special added tokens
// (DeepSeek's "</think>", "｜DSML｜"). Special tokens (BOS, EOS, padding, placeholders) are never
// text: a grammar cannot produce them; ConstraintMatcher allows the request's end tokens (EOS)
// exactly when the document is complete.
//
// Immutable and shared (one per served tokenizer; building it for 129,280 ids takes ~0.1 s).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

class Tokenizer;

class TokenVocabulary {
 public:
  struct Node {
    uint8_t byte = 0;                          // the byte on the edge into this node
    uint16_t depth = 0;                        // bytes from the root (the root is node 0, depth 0)
    int32_t end = 0;                           // one past the last node of this node's subtree
    int32_t tokens_begin = 0, tokens_end = 0;  // the tokens whose bytes end here
  };

  static std::shared_ptr<const TokenVocabulary> FromTokenizer(const Tokenizer& tokenizer);
  // `bytes[id]` for every id; `text[id]` false for special tokens and ids naming no token.
  static std::shared_ptr<const TokenVocabulary> FromTokens(std::vector<std::string> bytes, std::vector<bool> text);

  size_t size() const { return bytes_.size(); }
  // Mask words covering every id.
  size_t words() const { return (bytes_.size() + 63) / 64; }
  std::string_view bytes(int32_t id) const { return bytes_[id]; }
  bool is_text(int32_t id) const { return (text_mask_[id >> 6] >> (id & 63)) & 1; }
  const std::vector<uint64_t>& text_mask() const { return text_mask_; }
  size_t max_token_bytes() const { return max_token_bytes_; }

  const std::vector<Node>& nodes() const { return nodes_; }
  int32_t node_token(int32_t i) const { return node_tokens_[i]; }

 private:
  std::vector<std::string> bytes_;
  std::vector<uint64_t> text_mask_;
  std::vector<Node> nodes_;
  std::vector<int32_t> node_tokens_;
  size_t max_token_bytes_ = 0;
};

}  // namespace deepinfer
