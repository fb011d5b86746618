// Reader for the DIT1 table files that tools/golden/numerics_tables.py and kernel_cases.py
// write (format described there): named little-endian arrays computed by torch and the
// official reference kernels.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace deepinfer::testing {

struct Array {
  char dtype = 0;  // 'B' uint8, 'H' uint16, 'I'/'i' 32-bit ints, 'f' float32
  std::vector<uint32_t> shape;
  std::vector<uint8_t> bytes;

  template <typename T>
  std::vector<T> As() const {
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
  }
};

using Tables = std::map<std::string, Array>;

inline size_t ElementSize(char dtype) {
  switch (dtype) {
    case 'B':
      return 1;
    case 'H':
      return 2;
    case 'I':
    case 'i':
    case 'f':
      return 4;
    default:
      return 0;
  }
}

// `relative_path` is under DEEPINFER_TEST_DATA_DIR.
inline Tables ReadTables(const std::string& relative_path) {
  const std::string path = std::string(DEEPINFER_TEST_DATA_DIR) + "/" + relative_path;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (pos + n > file.size()) throw std::runtime_error("truncated table file " + path);
    std::memcpy(dst, file.data() + pos, n);
    pos += n;
  };
  char magic[4];
  take(magic, 4);
  if (std::memcmp(magic, "DIT1", 4) != 0) throw std::runtime_error("bad magic in " + path);
  uint32_t count = 0;
  take(&count, 4);
  Tables tables;
  for (uint32_t a = 0; a < count; ++a) {
    uint16_t name_len = 0;
    take(&name_len, 2);
    std::string key(name_len, '\0');
    take(key.data(), name_len);
    uint8_t dtype = 0, ndim = 0;
    take(&dtype, 1);
    take(&ndim, 1);
    Array arr;
    arr.dtype = static_cast<char>(dtype);
    arr.shape.resize(ndim);
    size_t elems = 1;
    for (auto& d : arr.shape) {
      take(&d, 4);
      elems *= d;
    }
    const size_t esize = ElementSize(arr.dtype);
    if (esize == 0) throw std::runtime_error("bad dtype in " + path);
    arr.bytes.resize(elems * esize);
    take(arr.bytes.data(), arr.bytes.size());
    tables.emplace(std::move(key), std::move(arr));
  }
  return tables;
}

inline const Array& Get(const Tables& t, const std::string& key) {
  auto it = t.find(key);
  if (it == t.end()) throw std::runtime_error("missing table " + key);
  return it->second;
}

// Bit-level comparison of the tables' floats with ours.
inline uint32_t Bits(float v) { return std::bit_cast<uint32_t>(v); }
inline float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

inline std::string Hex(uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Same float, bit for bit; any NaN matches any NaN.
inline bool SameFloat(float ours, float expected) {
  if (std::isnan(expected)) return std::isnan(ours);
  return Bits(ours) == Bits(expected);
}

// Distance in bf16 steps between two bf16-exact finite floats (+0 and -0 are the same point).
inline int Bf16UlpDistance(float a, float b) {
  auto key = [](float v) {
    const int bits = static_cast<int>(Bits(v) >> 16);
    return (bits & 0x8000) ? -(bits & 0x7fff) : bits;
  };
  return std::abs(key(a) - key(b));
}

// A table's bf16 bit patterns as floats.
inline std::vector<float> Bf16ToFloats(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = FromBits(static_cast<uint32_t>(bits[i]) << 16);
  return out;
}

}  // namespace deepinfer::testing
