#include "core/numpy_random.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

// A minimal JSON reader for the golden file (core does not depend on a JSON library): objects,
// arrays, strings without escapes, and integers kept as text so uint64 seeds and int64 values
// both survive exactly.
struct JsonValue {
  enum class Kind { kObject, kArray, kString, kNumber };
  Kind kind = Kind::kNumber;
  std::string text;  // string contents or number literal
  std::vector<JsonValue> items;
  std::map<std::string, JsonValue> members;

  const JsonValue& operator[](const std::string& key) const {
    auto it = members.find(key);
    if (kind != Kind::kObject || it == members.end()) throw MakeError("golden json: missing key ", key);
    return it->second;
  }
  template <typename T>
  T As() const {
    T value{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (kind != Kind::kNumber || ec != std::errc() || end != text.data() + text.size()) {
      throw MakeError("golden json: not an integer of the requested type: ", text);
    }
    return value;
  }
  std::vector<int64_t> AsInt64Vector() const {
    std::vector<int64_t> out;
    for (const JsonValue& item : items) out.push_back(item.As<int64_t>());
    return out;
  }
};

class JsonParser {
 public:
  explicit JsonParser(std::string text) : text_(std::move(text)) {}

  JsonValue Parse() {
    JsonValue value = ParseValue();
    SkipSpace();
    if (pos_ != text_.size()) throw MakeError("golden json: trailing data at ", pos_);
    return value;
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  char Peek() {
    SkipSpace();
    if (pos_ >= text_.size()) throw MakeError("golden json: unexpected end");
    return text_[pos_];
  }
  void Expect(char c) {
    if (Peek() != c) throw MakeError("golden json: expected '", c, "' at ", pos_);
    ++pos_;
  }
  std::string ParseString() {
    Expect('"');
    const size_t end = text_.find('"', pos_);
    if (end == std::string::npos) throw MakeError("golden json: unterminated string");
    std::string s = text_.substr(pos_, end - pos_);
    if (s.find('\\') != std::string::npos) throw MakeError("golden json: escapes are not supported");
    pos_ = end + 1;
    return s;
  }
  JsonValue ParseValue() {
    JsonValue value;
    const char c = Peek();
    if (c == '{') {
      value.kind = JsonValue::Kind::kObject;
      ++pos_;
      if (Peek() == '}') return ++pos_, value;
      while (true) {
        std::string key = ParseString();
        Expect(':');
        value.members[key] = ParseValue();
        if (Peek() == '}') return ++pos_, value;
        Expect(',');
      }
    }
    if (c == '[') {
      value.kind = JsonValue::Kind::kArray;
      ++pos_;
      if (Peek() == ']') return ++pos_, value;
      while (true) {
        value.items.push_back(ParseValue());
        if (Peek() == ']') return ++pos_, value;
        Expect(',');
      }
    }
    if (c == '"') {
      value.kind = JsonValue::Kind::kString;
      value.text = ParseString();
      return value;
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && (text_[pos_] == '-' || (text_[pos_] >= '0' && text_[pos_] <= '9'))) ++pos_;
    if (pos_ == start) throw MakeError("golden json: unexpected '", c, "' at ", pos_);
    value.text = text_.substr(start, pos_ - start);
    return value;
  }

  std::string text_;
  size_t pos_ = 0;
};

JsonValue LoadGolden() {
  const std::string path = std::string(DEEPINFER_TEST_DATA_DIR) + "/core/numpy_random_values.json";
  std::ifstream in(path);
  if (!in) throw MakeError("cannot open ", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return JsonParser(buffer.str()).Parse();
}

TEST(NumpyRandomTest, KnownEngramMultipliers) {
  EXPECT_EQ(EngramHashMultipliers(1, 4, 99092),
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(EngramHashMultipliers(14, 4, 99092),
            (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
}

TEST(NumpyRandomTest, GoldenEngramMultipliers) {
  const JsonValue golden = LoadGolden();
  ASSERT_EQ(golden["numpy_version"].kind, JsonValue::Kind::kString);
  const std::vector<JsonValue>& sets = golden["multipliers"].items;
  ASSERT_FALSE(sets.empty());
  size_t checked = 0;
  for (const JsonValue& set : sets) {
    const int64_t vocab = set["compressed_vocab_size"].As<int64_t>();
    const int ngram = set["max_ngram_size"].As<int>();
    const std::vector<JsonValue>& by_layer = set["by_layer"].items;
    ASSERT_EQ(by_layer.size(), 65u);
    for (size_t layer = 0; layer < by_layer.size(); ++layer) {
      EXPECT_EQ(EngramHashMultipliers(static_cast<int>(layer), ngram, vocab), by_layer[layer].AsInt64Vector())
          << "layer " << layer << " vocab " << vocab << " max_ngram_size " << ngram << " (numpy "
          << golden["numpy_version"].text << ")";
      ++checked;
    }
  }
  EXPECT_EQ(checked, sets.size() * 65);
}

TEST(NumpyRandomTest, GoldenIntegers) {
  const JsonValue golden = LoadGolden();
  const std::vector<JsonValue>& cases = golden["integers"].items;
  ASSERT_FALSE(cases.empty());
  for (const JsonValue& c : cases) {
    const uint64_t seed = c["seed"].As<uint64_t>();
    const int64_t low = c["low"].As<int64_t>();
    const int64_t high = c["high"].As<int64_t>();
    const std::vector<int64_t> expected = c["values"].AsInt64Vector();
    EXPECT_EQ(NumpyDefaultRngIntegers(seed, low, high, expected.size()), expected)
        << "seed " << seed << " range [" << low << ", " << high << ") (numpy " << golden["numpy_version"].text << ")";
  }
}

TEST(NumpyRandomTest, PrefixStableAcrossCounts) {
  // A fresh generator per call: fewer draws are a prefix of more draws, in both sampler widths.
  for (int64_t high : {int64_t{3}, int64_t{1} << 40}) {
    const std::vector<int64_t> many = NumpyDefaultRngIntegers(10007, 0, high, 7);
    for (size_t n = 0; n <= many.size(); ++n) {
      EXPECT_EQ(NumpyDefaultRngIntegers(10007, 0, high, n), std::vector<int64_t>(many.begin(), many.begin() + n));
    }
  }
}

TEST(NumpyRandomTest, SingleValueRangeAndBounds) {
  EXPECT_EQ(NumpyDefaultRngIntegers(5, -7, -6, 3), (std::vector<int64_t>{-7, -7, -7}));
  EXPECT_EQ(EngramHashMultipliers(3, 4, std::numeric_limits<int64_t>::max()), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_TRUE(EngramHashMultipliers(3, 0, 99092).empty());
  for (const int64_t value : NumpyDefaultRngIntegers(123, -3, 4, 100)) {
    EXPECT_GE(value, -3);
    EXPECT_LT(value, 4);
  }
}

TEST(NumpyRandomTest, RejectsBadArguments) {
  EXPECT_THROW(NumpyDefaultRngIntegers(0, 5, 5, 1), Error);
  EXPECT_THROW(NumpyDefaultRngIntegers(0, 6, 5, 1), Error);
  EXPECT_THROW(EngramHashMultipliers(-1, 4, 99092), Error);
  EXPECT_THROW(EngramHashMultipliers(0, -1, 99092), Error);
  EXPECT_THROW(EngramHashMultipliers(0, 4, 0), Error);
}

}  // namespace
}  // namespace deepinfer
