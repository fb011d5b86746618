// Helpers for the tokenizer tests: the default tokenizer loaded once, and a little-endian
// reader for the golden files written by tools/golden/tokenizer/*.py.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {

inline const std::string kDefaultTokenizerPath = DEEPINFER_SOURCE_DIR "/data/tokenizer/tokenizer.json";
inline const std::string kTokenizerDataDir = DEEPINFER_TEST_DATA_DIR "/tokenizer";

// Loading takes a few hundred milliseconds, so all tests share one immutable instance.
inline const Tokenizer& DefaultTokenizer() {
  static const Tokenizer tokenizer = Tokenizer::FromFile(kDefaultTokenizerPath);
  return tokenizer;
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

class LittleEndianReader {
 public:
  explicit LittleEndianReader(std::string bytes) : bytes_(std::move(bytes)) {}

  bool AtEnd() const { return offset_ == bytes_.size(); }

  template <typename T>
  T Read() {
    T value{};
    if (offset_ + sizeof(T) > bytes_.size()) throw std::runtime_error("golden file truncated");
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));  // the test hosts are little-endian
    offset_ += sizeof(T);
    return value;
  }

  std::string ReadBytes(size_t length) {
    if (offset_ + length > bytes_.size()) throw std::runtime_error("golden file truncated");
    std::string result = bytes_.substr(offset_, length);
    offset_ += length;
    return result;
  }

 private:
  std::string bytes_;
  size_t offset_ = 0;
};

}  // namespace deepinfer::testing
