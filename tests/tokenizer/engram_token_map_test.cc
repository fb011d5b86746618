#include "tokenizer/engram_token_map.h"

#include <gtest/gtest.h>

#include "golden_reader.h"

namespace deepinfer {
namespace {

using testing::DefaultTokenizer;

// Expected values come from HF `tokenizers` running the reference normalizer chain.
TEST(TokenizerEngramTest, NormalizeMatchesReferenceNormalizerChain) {
  EXPECT_EQ(EngramNormalize("  Hello\t World\n"), "hello world");
  EXPECT_EQ(EngramNormalize(" "), " ");
  EXPECT_EQ(EngramNormalize("\t\n"), " ");
  EXPECT_EQ(EngramNormalize("\u3000"), " ");  // NFKC turns it into a plain space
  EXPECT_EQ(EngramNormalize("Caf\u00e9"), "cafe");
  EXPECT_EQ(EngramNormalize("\u0130stanbul"), "istanbul");
  EXPECT_EQ(EngramNormalize("\ufb01"), "fi");
  EXPECT_EQ(EngramNormalize("\u00a0x\u00a0"), "x");
  EXPECT_EQ(EngramNormalize("\u2028"), "");
  EXPECT_EQ(EngramNormalize("\u03a3\u0391\u03a3"), "\u03c3\u03b1\u03c3");  // per character: no final sigma
  EXPECT_EQ(EngramNormalize("\ue000a"), " a");
  EXPECT_EQ(EngramNormalize("\u2460"), "1");
  EXPECT_EQ(EngramNormalize("a\u0903b\u20ddc"), "abc");  // spacing and enclosing marks go too
}

TEST(TokenizerEngramTest, MatchesReferenceForEveryToken) {
  const EngramTokenMap map = BuildEngramTokenMap(DefaultTokenizer());
  ASSERT_EQ(map.compressed_id.size(), 129280u);
  EXPECT_EQ(map.compressed_vocab_size, 99092);

  // The golden file lists only tokens that reuse an earlier key; every other token takes the
  // next fresh compressed id (see tools/golden/tokenizer/engram_token_map.py).
  testing::LittleEndianReader repeats(
      testing::ReadFileBytes(testing::kTokenizerDataDir + "/engram_token_map_repeats.bin"));
  std::vector<int32_t> expected(map.compressed_id.size(), -1);
  while (!repeats.AtEnd()) {
    const int32_t token = repeats.Read<int32_t>();
    expected.at(token) = repeats.Read<int32_t>();
  }
  int32_t next_fresh = 0;
  int mismatches = 0;
  for (size_t token = 0; token < expected.size(); ++token) {
    const int32_t want = expected[token] >= 0 ? expected[token] : next_fresh++;
    if (map.compressed_id[token] != want && ++mismatches <= 10) {
      ADD_FAILURE() << "token " << token << " (" << DefaultTokenizer().IdToToken(static_cast<int32_t>(token))
                    << "): compressed id " << map.compressed_id[token] << ", reference " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(next_fresh, 99092);
}

}  // namespace
}  // namespace deepinfer
