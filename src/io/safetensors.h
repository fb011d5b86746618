// Safetensors checkpoints, memory-mapped and used in place.
//
// A checkpoint is a single `.safetensors` file, or a directory holding either
// `model.safetensors.index.json` (shards listed in its "weight_map") or `*.safetensors` files.
// Every header is validated completely when opened: a damaged or hostile file produces one
// specific deepinfer::Error naming the file and the problem, never a crash or an out-of-bounds
// read later. The tensors must cover each file's data section exactly (no gaps, no trailing
// bytes), and a directory's files are confined to it (core/model_directory.h): an index cannot
// make the engine open anything outside the model directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "core/model_directory.h"

namespace deepinfer {

enum class DType { kBF16, kF16, kF32, kF8E4M3, kF8E8M0, kI8, kU8, kI32, kI64 };

// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType dtype);
size_t DTypeSize(DType dtype);
std::optional<DType> ParseDType(std::string_view name);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping of `file`
  size_t nbytes = 0;
  std::string file;  // path of the file that holds the tensor

  int64_t numel() const;
  std::string ShapeString() const;  // "[129280, 5120]"
};

// The validated header of safetensors bytes: tensors point into `bytes`.
struct SafetensorsLayout {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};
// Validates a whole safetensors file held in memory; throws Error("<path>: <what is wrong>").
SafetensorsLayout ParseSafetensorsLayout(const uint8_t* bytes, uint64_t size, const std::string& path);

// model.safetensors.index.json: shard file name -> the tensors its weight_map places there
// (std::map: shards open once each, in a stable order). The names are not checked here.
using ShardIndex = std::map<std::string, std::vector<std::string>>;
ShardIndex ParseShardIndex(std::string_view text, const std::string& index_path);

class SafetensorsFile {
 public:
  // Maps and validates the file; throws Error("<path>: <what is wrong>").
  explicit SafetensorsFile(const std::string& path);
  explicit SafetensorsFile(const FileHandle& file);

  const std::string& path() const { return file_->path(); }
  bool Contains(const void* address) const { return file_->Contains(address); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::unique_ptr<MappedFile> file_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

class Checkpoint {
 public:
  // `path` is a .safetensors file or a model directory (see the file comment).
  static Checkpoint Open(const std::string& path);

  const TensorInfo* Find(std::string_view name) const;
  std::vector<std::string> Names() const;  // sorted
  size_t size() const { return by_name_.size(); }
  const std::vector<std::string>& files() const { return file_paths_; }
  // The file whose mapping holds `address` (for a MappedFileFault), or nullptr.
  const std::string* FileContaining(const void* address) const;

 private:
  void AddFile(std::shared_ptr<SafetensorsFile> file);
  void AddIndexedShards(const ModelDirectory& dir, const FileHandle& index_file);

  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<std::string> file_paths_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
};

}  // namespace deepinfer
