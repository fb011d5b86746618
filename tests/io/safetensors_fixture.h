// Helpers of the safetensors tests: safetensors bytes from a header text, and a fixture with a
// scratch directory.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "error_of.h"

namespace deepinfer {

namespace fs = std::filesystem;

// The 8-byte little-endian length prefix of a safetensors file.
inline std::string LengthPrefix(uint64_t length) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out;
}

// Builds safetensors bytes from a header JSON text and the raw data section.
inline std::string Safetensors(const std::string& header, const std::string& data = "") {
  return LengthPrefix(header.size()) + header + data;
}

template <typename T>
inline std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A valid two-tensor file: "w" F32 [2, 3] = 1..6 and "b" BF16 [2] = {1.0, -2.0}, plus metadata.
inline std::string ValidFile() {
  const std::string header = R"({"__metadata__": {"format": "pt"},)"
                             R"( "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
                             R"( "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]}})";
  return Safetensors(header, Bytes<float>({1, 2, 3, 4, 5, 6}) + Bytes<uint16_t>({0x3f80, 0xc000}));
}

// A one-tensor file holding U8 `name` = {value, value}.
inline std::string OneTensor(const std::string& name, uint8_t value) {
  return Safetensors(R"({")" + name + R"(": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})",
                     std::string(2, static_cast<char>(value)));
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "deepinfer_safetensors_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Write(const std::string& relative, const std::string& bytes) {
    const fs::path path = dir_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << path;
    return path.string();
  }

  std::string Path(const std::string& relative) const { return (dir_ / relative).string(); }

  fs::path dir_;
};

}  // namespace deepinfer
