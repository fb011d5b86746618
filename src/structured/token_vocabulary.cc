#include "structured/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(const Tokenizer& tokenizer) {
  const size_t n = tokenizer.size();
  std::vector<std::string> bytes(n);
  std::vector<bool> text(n, false);
  for (size_t id = 0; id < n; ++id) {
    const int32_t i = static_cast<int32_t>(id);
    bytes[id] = tokenizer.TokenBytes(i);
    text[id] = !bytes[id].empty() && !tokenizer.IsSpecial(i);
  }
  return FromTokens(std::move(bytes), std::move(text));
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokens(std::vector<std::string> bytes,
                                                                   std::vector<bool> text) {
  DI_CHECK(bytes.size() == text.size() && bytes.size() < (size_t{1} << 31));
  auto v = std::make_shared<TokenVocabulary>();
  v->bytes_ = std::move(bytes);
  v->text_mask_.assign(v->words(), 0);
  std::vector<int32_t> ids;
  for (size_t id = 0; id < v->bytes_.size(); ++id) {
    if (!text[id] || v->bytes_[id].empty()) continue;
    if (v->bytes_[id].size() > UINT16_MAX) throw MakeError("token ", id, " is longer than 65535 bytes");
    v->text_mask_[id >> 6] |= uint64_t{1} << (id & 63);
    ids.push_back(static_cast<int32_t>(id));
    v->max_token_bytes_ = std::max(v->max_token_bytes_, v->bytes_[id].size());
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return v->bytes_[a] < v->bytes_[b]; });

  // Preorder trie: in sorted order, each token shares its longest common prefix with the path
  // left by the previous one.
  v->nodes_.push_back(Node{});
  std::vector<int32_t> path = {0};  // path[d] = node at depth d
  std::string_view previous;
  for (int32_t id : ids) {
    const std::string_view b = v->bytes_[id];
    size_t common = 0;
    while (common < b.size() && common < previous.size() && b[common] == previous[common]) ++common;
    while (path.size() > common + 1) {
      v->nodes_[path.back()].end = static_cast<int32_t>(v->nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < b.size(); ++d) {
      Node node;
      node.byte = static_cast<uint8_t>(b[d]);
      node.depth = static_cast<uint16_t>(d + 1);
      path.push_back(static_cast<int32_t>(v->nodes_.size()));
      v->nodes_.push_back(node);
    }
    Node& last = v->nodes_[path.back()];
    if (last.tokens_begin == last.tokens_end) {
      last.tokens_begin = last.tokens_end = static_cast<int32_t>(v->node_tokens_.size());
    }
    v->node_tokens_.push_back(id);
    ++last.tokens_end;
    previous = b;
  }
  while (!path.empty()) {
    v->nodes_[path.back()].end = static_cast<int32_t>(v->nodes_.size());
    path.pop_back();
  }
  return v;
}

}  // namespace deepinfer
