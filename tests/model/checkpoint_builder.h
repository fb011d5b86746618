// Test helpers that build broken model directories at test time: copy a tiny released-layout
// model into a scratch directory, then damage it (rewrite a safetensors header, drop or retype
// a tensor, truncate a file, edit a config). Independent of src/io so a bug in the reader
// cannot hide in the writer.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace deepinfer::testing {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "deepinfer_load_errors_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) throw std::runtime_error("cannot write " + path.string());
}

// Copies the test model `name` (tests/data/models/<name>) into `dst`, leaving out golden/.
// Every file is copied (the engine reads nothing outside a model directory, so a symlink to the
// source tree would not load).
inline void CopyModelDir(const fs::path& src, const fs::path& dst) {
  fs::create_directories(dst);
  for (const fs::directory_entry& entry : fs::directory_iterator(src)) {
    const fs::path name = entry.path().filename();
    if (name == "golden") continue;
    const fs::path target = dst / name;
    if (entry.is_directory()) {
      CopyModelDir(entry.path(), target);
    } else {
      fs::copy_file(entry.path(), target);
    }
  }
}

// A safetensors file as plain values: tensors in file order, each with its raw bytes.
struct StTensor {
  std::string name;
  std::string dtype;  // safetensors spelling: "BF16", "F8_E4M3", ...
  std::vector<int64_t> shape;
  std::string bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    return n;
  }
};

inline size_t StDTypeSize(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {{"BF16", 2},    {"F16", 2},     {"F32", 4},
                                                      {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I8", 1},
                                                      {"U8", 1},      {"I32", 4},     {"I64", 8}};
  const auto it = sizes.find(dtype);
  if (it == sizes.end()) throw std::runtime_error("unknown dtype " + dtype);
  return it->second;
}

class StFile {
 public:
  static StFile Read(const fs::path& path) {
    const std::string bytes = ReadBytes(path);
    if (bytes.size() < 8) throw std::runtime_error("not a safetensors file: " + path.string());
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[i]);
    const nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, header_len));
    const size_t data_start = 8 + header_len;
    StFile file;
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        file.metadata = value;
        continue;
      }
      StTensor t;
      t.name = name;
      t.dtype = value["dtype"].get<std::string>();
      t.shape = value["shape"].get<std::vector<int64_t>>();
      const auto begin = value["data_offsets"][0].get<size_t>();
      const auto end = value["data_offsets"][1].get<size_t>();
      t.bytes = bytes.substr(data_start + begin, end - begin);
      file.tensors.push_back(std::move(t));
    }
    return file;
  }

  // Lays the tensors out contiguously in order, as writers do.
  std::string Serialize() const {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.is_null()) header["__metadata__"] = metadata;
    std::string data;
    for (const StTensor& t : tensors) {
      header[t.name] = {
          {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
      data += t.bytes;
    }
    return WithHeader(header.dump(), data);
  }
  void Write(const fs::path& path) const { WriteBytes(path, Serialize()); }

  // An 8-byte little-endian length, the header text, then the data, without any checks.
  static std::string WithHeader(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    uint64_t len = header.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    return out + header + data;
  }

  StTensor& Get(const std::string& name) {
    for (StTensor& t : tensors) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name + " in the test checkpoint");
  }
  void Remove(const std::string& name) {
    const size_t before = tensors.size();
    std::erase_if(tensors, [&](const StTensor& t) { return t.name == name; });
    if (tensors.size() == before) throw std::runtime_error("no tensor " + name + " to remove");
  }
  // Restores a consistent byte size (zeros) after a dtype or shape edit.
  void Retype(const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
    StTensor& t = Get(name);
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.bytes.assign(static_cast<size_t>(t.numel()) * StDTypeSize(dtype), '\0');
  }
  void Retype(const std::string& name, const std::string& dtype) { Retype(name, dtype, Get(name).shape); }

  std::vector<StTensor> tensors;
  nlohmann::ordered_json metadata;  // null when absent
};

// Reads, edits and rewrites a JSON file (config.json, an index), keeping key order.
inline void EditJson(const fs::path& path, const std::function<void(nlohmann::ordered_json&)>& edit) {
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(ReadBytes(path));
  edit(json);
  WriteBytes(path, json.dump(1));
}

}  // namespace deepinfer::testing
