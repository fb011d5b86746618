// Masks on the real 129,280-token DeepSeek-V4.1 vocabulary: along sampled token walks through
// JSON Schema documents, the mask (trie walk + per-state cache + dependent re-checks) equals a
// token-by-token verdict that feeds each token's bytes to the grammar directly.
#include <gtest/gtest.h>

#include <random>

#include "structured/constraint.h"
#include "structured/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

const std::shared_ptr<const TokenVocabulary>& RealVocabulary() {
  static const std::shared_ptr<const TokenVocabulary> vocabulary = TokenVocabulary::FromTokenizer(
      Tokenizer::FromFile(std::string(DEEPINFER_SOURCE_DIR) + "/data/tokenizer/tokenizer.json"));
  return vocabulary;
}

TEST(RealVocabularyTest, TrieHoldsEveryTextToken) {
  const TokenVocabulary& v = *RealVocabulary();
  EXPECT_EQ(v.size(), 129280u);
  size_t text = 0;
  for (size_t id = 0; id < v.size(); ++id) text += v.is_text(static_cast<int32_t>(id));
  size_t in_trie = 0;
  for (const TokenVocabulary::Node& n : v.nodes()) in_trie += static_cast<size_t>(n.tokens_end - n.tokens_begin);
  EXPECT_EQ(in_trie, text);
  EXPECT_FALSE(v.is_text(0));      // BOS
  EXPECT_FALSE(v.is_text(1));      // EOS
  EXPECT_TRUE(v.is_text(128822));  // "</think>": a non-special added token
  EXPECT_EQ(v.bytes(128822), "</think>");
}

TEST(RealVocabularyTest, MasksEqualTokenByTokenVerdicts) {
  const auto schema = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 12},
      "kind": {"enum": ["alpha", "beta", "gamma delta"]},
      "score": {"type": "number", "minimum": -2.5, "maximum": 1000},
      "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 3},
      "when": {"type": "string", "format": "date"},
      "child": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "additionalProperties": true}
    },
    "required": ["name", "kind", "score"],
    "additionalProperties": false})");
  const auto constraint = std::make_shared<Constraint>(CompileJsonSchema(schema), RealVocabulary());
  const TokenVocabulary& v = *RealVocabulary();
  std::mt19937 rng(99);
  std::vector<uint64_t> mask(v.words());
  size_t checked_states = 0;
  for (int walk = 0; walk < 3; ++walk) {
    ConstraintMatcher m(constraint, {1});
    for (int step = 0; step < 14 && !m.finished(); ++step) {
      ASSERT_TRUE(m.FillNextTokenMask(mask));
      std::vector<int32_t> allowed;
      for (size_t t = 0; t < v.size(); ++t) {
        const int32_t id = static_cast<int32_t>(t);
        const bool in_mask = (mask[t >> 6] >> (t & 63)) & 1;
        ASSERT_EQ(in_mask, m.IsAllowed(id)) << "token " << id << " \"" << v.bytes(id) << "\" at step " << step;
        if (in_mask) allowed.push_back(id);
      }
      ++checked_states;
      // Prefer longer tokens now and then so the walk gets deep into the document.
      int32_t token = allowed[rng() % allowed.size()];
      for (int k = 0; k < 3; ++k) {
        const int32_t other = allowed[rng() % allowed.size()];
        if (v.bytes(other).size() > v.bytes(token).size()) token = other;
      }
      ASSERT_TRUE(m.Accept(token));
    }
  }
  EXPECT_GE(checked_states, 30u);
}

}  // namespace
}  // namespace deepinfer
