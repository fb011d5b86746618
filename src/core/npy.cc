#include "core/npy.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.h"

namespace deepinfer {

void WriteNpyFloat32(const std::string& path, const std::vector<size_t>& shape, const float* data) {
  std::ostringstream dict;
  dict << "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  size_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
    count *= shape[i];
  }
  dict << "), }";
  std::string header = dict.str();
  const size_t unpadded = 10 + header.size() + 1;  // magic(6) + version(2) + len(2) + header + '\n'
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw MakeError(path, ": cannot open for writing");
  const uint16_t header_len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&header_len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(float)));
  if (!out) throw MakeError(path, ": write failed");
}

NpyArray ReadNpyFloat32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MakeError(path, ": cannot open");
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw MakeError(path, ": not a .npy file");
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    uint16_t len16 = 0;
    in.read(reinterpret_cast<char*>(&len16), 2);
    header_len = len16;
  } else {
    in.read(reinterpret_cast<char*>(&header_len), 4);
  }
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  if (!in) throw MakeError(path, ": truncated header");
  std::smatch match;
  if (!std::regex_search(header, match, std::regex("'descr':\\s*'([<|>]?[fi][48])'")))
    throw MakeError(path, ": no dtype in header");
  const std::string descr = match[1];
  if (header.find("'fortran_order': True") != std::string::npos) throw MakeError(path, ": fortran order unsupported");
  if (!std::regex_search(header, match, std::regex("'shape':\\s*\\(([^)]*)\\)"))) throw MakeError(path, ": no shape");
  NpyArray array;
  std::string dims = match[1];
  std::stringstream dim_stream(dims);
  std::string item;
  size_t count = 1;
  while (std::getline(dim_stream, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    array.shape.push_back(std::stoul(item));
    count *= array.shape.back();
  }
  array.values.resize(count);
  if (descr == "<f4" || descr == "f4") {
    in.read(reinterpret_cast<char*>(array.values.data()), static_cast<std::streamsize>(count * 4));
  } else if (descr == "<f8" || descr == "f8") {
    std::vector<double> doubles(count);
    in.read(reinterpret_cast<char*>(doubles.data()), static_cast<std::streamsize>(count * 8));
    for (size_t i = 0; i < count; ++i) array.values[i] = static_cast<float>(doubles[i]);
  } else {
    throw MakeError(path, ": unsupported dtype ", descr, " (expected <f4 or <f8)");
  }
  if (!in) throw MakeError(path, ": truncated data");
  return array;
}

}  // namespace deepinfer
