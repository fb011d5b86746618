#include "io/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "core/bounded_json.h"
#include "core/error.h"
#include "core/model_directory.h"

namespace deepinfer {

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeEntry, 9> kDTypes = {{
    {DType::kBF16, "BF16", 2},
    {DType::kF16, "F16", 2},
    {DType::kF32, "F32", 4},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
}};

// Same limit as the reference `safetensors` library: a larger header is not a checkpoint we could have written,
// and parsing it would only burn memory on hostile input. The format nests three levels (header, entry, shape).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr JsonLimits kHeaderLimits{kMaxHeaderBytes, 3 + 64};
// model.safetensors.index.json: DeepSeek-V3's lists ~92k tensors in ~9 MB; it nests two levels.
constexpr JsonLimits kIndexLimits{64 << 20, 2 + 64};
constexpr std::string_view kIndexName = "model.safetensors.index.json";

// Built by appending: GCC 12 at -O3 raises a false -Wrestrict on "'" + std::string + "'".
std::string Quoted(std::string_view name) {
  std::string out = "'";
  out += Printable(name);
  out += '\'';
  return out;
}

std::string SupportedDTypes() {
  std::string out;
  for (const DTypeEntry& entry : kDTypes) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string OffsetsString(uint64_t begin, uint64_t end) {
  std::string out = "[";
  out += std::to_string(begin);
  out += ", ";
  out += std::to_string(end);
  out += ']';
  return out;
}

// A header entry after its own (file-independent) checks; offsets are relative to the data section.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Validates one tensor entry of the header. `where` is "<path>: tensor '<name>'" so every message names both.
Entry ParseEntry(const std::string& where, const std::string& name, const Json& value) {
  if (!value.is_object()) throw MakeError(where, ": entry must be a JSON object, got ", value.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) throw MakeError(where, ": missing \"", key, "\"");
  }
  Entry entry;
  entry.name = name;

  const Json& dtype = value["dtype"];
  if (!dtype.is_string()) throw MakeError(where, ": \"dtype\" must be a string, got ", dtype.type_name());
  const std::optional<DType> parsed = ParseDType(dtype.get_ref<const std::string&>());
  if (!parsed) {
    throw MakeError(where, ": unsupported dtype ", Quoted(dtype.get_ref<const std::string&>()),
                    " (supported: ", SupportedDTypes(), ")");
  }
  entry.dtype = *parsed;

  const Json& shape = value["shape"];
  if (!shape.is_array()) throw MakeError(where, ": \"shape\" must be an array of integers, got ", shape.type_name());
  for (const Json& dim : shape) {
    if (dim.is_number_unsigned()) {
      const auto v = dim.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw MakeError(where, ": shape dimension ", v, " is too large");
      }
      entry.shape.push_back(static_cast<int64_t>(v));
    } else if (dim.is_number_integer()) {
      throw MakeError(where, ": negative dimension ", dim.get<int64_t>(), " in \"shape\"");
    } else {
      throw MakeError(where, ": \"shape\" must be an array of integers, found ", dim.type_name(), " ",
                      Printable(BoundedDump(dim, 100)));
    }
  }

  const Json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw MakeError(where, ": \"data_offsets\" must be [begin, end] with non-negative integers, got ",
                    Printable(BoundedDump(offsets, 100)));
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.begin > entry.end) {
    throw MakeError(where, ": data_offsets begin > end: ", OffsetsString(entry.begin, entry.end));
  }

  // The products are checked because a hostile shape could wrap to a small number that matches the offsets.
  uint64_t numel = 1;
  for (const int64_t dim : entry.shape) {
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw MakeError(where, ": shape ", ShapeToString(entry.shape), " overflows the element count");
    }
  }
  const size_t dtype_size = DTypeSize(entry.dtype);
  uint64_t expected = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size), &expected)) {
    throw MakeError(where, ": shape ", ShapeToString(entry.shape), " of ", DTypeName(entry.dtype),
                    " overflows the byte size");
  }
  const uint64_t actual = entry.end - entry.begin;
  if (expected != actual) {
    throw MakeError(where, ": byte size mismatch: shape ", ShapeToString(entry.shape), " of ", DTypeName(entry.dtype),
                    " needs ", expected, " bytes, data_offsets ", OffsetsString(entry.begin, entry.end), " hold ",
                    actual);
  }
  return entry;
}

}  // namespace

std::string_view DTypeName(DType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  DI_CHECK(false, "unknown DType ", static_cast<int>(dtype));
  return {};
}

size_t DTypeSize(DType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.size;
  }
  DI_CHECK(false, "unknown DType ", static_cast<int>(dtype));
  return 0;
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  // Overflow was ruled out when the header was validated.
  int64_t n = 1;
  for (const int64_t dim : shape) n *= dim;
  return n;
}

std::string TensorInfo::ShapeString() const { return ShapeToString(shape); }

SafetensorsLayout ParseSafetensorsLayout(const uint8_t* bytes, uint64_t file_size, const std::string& path) {
  if (file_size < 8) {
    throw MakeError(path, ": truncated: ", file_size, " bytes, a safetensors file starts with an 8-byte header length");
  }
  // Assembled byte by byte: the format is little-endian regardless of the host.
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > file_size - 8) {
    throw MakeError(path, ": header length ", header_len, " runs past the end of the file (", file_size,
                    " bytes, at most ", file_size - 8, " available for the header)");
  }
  if (header_len > kMaxHeaderBytes) {
    throw MakeError(path, ": header length ", header_len, " exceeds the ", kMaxHeaderBytes, "-byte limit");
  }

  // Duplicate keys are rejected by the parser: nlohmann would keep only the last, so a duplicated tensor name
  // would silently shadow the first tensor.
  const Json header = ParseJsonBounded(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len),
                                       path + ": header", kHeaderLimits);
  if (!header.is_object()) throw MakeError(path, ": header is not a JSON object (got ", header.type_name(), ")");

  SafetensorsLayout layout;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object())
        throw MakeError(path, ": \"__metadata__\" must be a JSON object, got ", value.type_name());
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) {
          throw MakeError(path, ": \"__metadata__\" value for ", Quoted(key), " must be a string, got ",
                          item.type_name());
        }
        layout.metadata[key] = item.get<std::string>();
      }
      continue;
    }
    entries.push_back(ParseEntry(path + ": tensor " + Quoted(name), name, value));
  }

  // The tensors must tile the data section exactly, as the reference library requires: sorted by offsets, each
  // starts where the previous one ends (zero-byte tensors too) and the last ends at the end of the file. A gap or
  // trailing bytes mean the offsets do not describe this file (e.g. bytes inserted after the header), and the
  // tensors would be read from the wrong place.
  std::vector<const Entry*> by_offset;
  by_offset.reserve(entries.size());
  for (const Entry& entry : entries) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  const Entry* previous = nullptr;
  const Entry* gap_after = nullptr;  // the first tensor followed by a gap
  const Entry* gap_before = nullptr;
  uint64_t covered = 0;  // end of the tensors so far
  for (const Entry* entry : by_offset) {
    if (entry->begin < covered) {
      throw MakeError(path, ": tensors ", Quoted(previous->name), " ", OffsetsString(previous->begin, previous->end),
                      " and ", Quoted(entry->name), " ", OffsetsString(entry->begin, entry->end), " overlap");
    }
    if (entry->begin > covered && gap_before == nullptr) {
      gap_after = previous;
      gap_before = entry;
    }
    covered = entry->end;
    previous = entry;
  }

  // Bounds: a header that lays its tensors out contiguously but ends past the data is a cut-off download or
  // copy, which deserves a different hint than a header with one nonsense offset.
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  for (const Entry* entry : by_offset) {
    if (entry->end <= data_size) continue;
    if (gap_before == nullptr && entry->begin != entry->end) {
      throw MakeError(path, ": truncated: tensor ", Quoted(entry->name), " data_offsets ",
                      OffsetsString(entry->begin, entry->end), " but the data section has only ", data_size,
                      " bytes (file is ", file_size, " bytes, the header describes ", data_start + covered, ")");
    }
    throw MakeError(path, ": tensor ", Quoted(entry->name), ": data_offsets ", OffsetsString(entry->begin, entry->end),
                    " end beyond the data section (", data_size, " bytes)");
  }
  if (gap_before != nullptr) {
    const uint64_t from = gap_after == nullptr ? 0 : gap_after->end;
    throw MakeError(path, ": data bytes [", from, ", ", gap_before->begin, ") belong to no tensor (",
                    gap_after == nullptr ? std::string("before the first tensor")
                                         : "between " + Quoted(gap_after->name) + " and " + Quoted(gap_before->name),
                    "); the tensors must cover the data section exactly");
  }
  if (covered != data_size) {
    throw MakeError(path, ": the tensors cover ", covered, " bytes but the data section holds ", data_size, " (",
                    data_size - covered,
                    " bytes belong to no tensor, e.g. bytes inserted after the header); the tensors must cover the "
                    "data section exactly");
  }

  layout.tensors.reserve(entries.size());
  for (Entry& entry : entries) {
    TensorInfo info;
    info.name = std::move(entry.name);
    info.dtype = entry.dtype;
    info.shape = std::move(entry.shape);
    info.data = bytes + data_start + entry.begin;
    info.nbytes = static_cast<size_t>(entry.end - entry.begin);
    info.file = path;
    layout.tensors.push_back(std::move(info));
  }
  return layout;
}

ShardIndex ParseShardIndex(std::string_view text, const std::string& index_path) {
  const Json parsed = ParseJsonBounded(text, index_path, kIndexLimits);
  if (!parsed.is_object() || !parsed.contains("weight_map") || !parsed["weight_map"].is_object()) {
    throw MakeError(index_path, ": expected a JSON object with a \"weight_map\" object");
  }
  ShardIndex shards;
  for (const auto& [tensor, shard] : parsed["weight_map"].items()) {
    if (!shard.is_string()) {
      throw MakeError(index_path, ": weight_map entry for ", Quoted(tensor), " must be a file name string, got ",
                      shard.type_name());
    }
    shards[shard.get<std::string>()].push_back(tensor);
  }
  if (shards.empty()) throw MakeError(index_path, ": weight_map is empty");
  return shards;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : SafetensorsFile(OpenRegularFile(path)) {}

SafetensorsFile::SafetensorsFile(const FileHandle& file) : file_(std::make_unique<MappedFile>(file)) {
  SafetensorsLayout layout = ParseSafetensorsLayout(file_->data(), file_->size(), file_->path());
  tensors_ = std::move(layout.tensors);
  metadata_ = std::move(layout.metadata);
}

void Checkpoint::AddFile(std::shared_ptr<SafetensorsFile> file) {
  // Tensor names are unique across the checkpoint: a second copy would make Find ambiguous.
  for (const TensorInfo& info : file->tensors()) {
    const auto [it, inserted] = by_name_.emplace(info.name, &info);
    if (!inserted) {
      throw MakeError("tensor ", Quoted(info.name), " appears in two files: ", it->second->file, " and ", file->path());
    }
  }
  file_paths_.push_back(file->path());
  files_.push_back(std::move(file));
}

void Checkpoint::AddIndexedShards(const ModelDirectory& dir, const FileHandle& index_file) {
  const std::string& index = index_file.path();
  const ShardIndex shards = ParseShardIndex(ReadWholeFile(index_file, kIndexLimits.max_bytes), index);
  for (const auto& [shard, tensors] : shards) {
    const std::string what = "shard listed in " + index + " for tensor " + Quoted(tensors.front());
    auto file = std::make_shared<SafetensorsFile>(dir.Open(shard, what));
    std::set<std::string_view> present;
    for (const TensorInfo& info : file->tensors()) present.insert(info.name);
    for (const std::string& tensor : tensors) {
      if (!present.contains(tensor)) {
        throw MakeError(index, ": tensor ", Quoted(tensor), " is mapped to shard ", Quoted(shard),
                        " but that file does not contain it: ", file->path());
      }
    }
    AddFile(std::move(file));
  }
}

Checkpoint Checkpoint::Open(const std::string& path) {
  Checkpoint checkpoint;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::is_directory(status)) {
    const ModelDirectory dir(path);
    // Anything at the index name is the index: a dangling or looping symlink or a FIFO there is an error, not
    // a reason to fall back to scanning the directory.
    if (std::optional<FileHandle> index = dir.OpenIfPresent(kIndexName, "the shard index")) {
      checkpoint.AddIndexedShards(dir, *index);
      return checkpoint;
    }
    const std::vector<std::string> names = dir.List(".safetensors");
    if (names.empty()) {
      throw MakeError(path, ": no ", kIndexName, " and no *.safetensors files in the directory");
    }
    for (const std::string& name : names) {
      checkpoint.AddFile(std::make_shared<SafetensorsFile>(dir.Open(name, "a *.safetensors file of the model")));
    }
    return checkpoint;
  }
  if (!fs::exists(status)) {
    struct stat link {};
    if (::lstat(path.c_str(), &link) != 0) throw MakeError(path, ": no such file or directory");
    // A dangling or looping symlink: OpenRegularFile says which.
  }
  if (path.ends_with(".index.json")) {
    // Accepted so a caller can point at the index itself; its shards must sit in its directory.
    const FileHandle index = OpenRegularFile(path);
    const std::string parent = fs::path(path).parent_path().string();
    checkpoint.AddIndexedShards(ModelDirectory(parent.empty() ? "." : parent), index);
    return checkpoint;
  }
  checkpoint.AddFile(std::make_shared<SafetensorsFile>(path));
  return checkpoint;
}

const std::string* Checkpoint::FileContaining(const void* address) const {
  for (const std::shared_ptr<SafetensorsFile>& file : files_) {
    if (file->Contains(address)) return &file->path();
  }
  return nullptr;
}

const TensorInfo* Checkpoint::Find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(by_name_.size());
  for (const auto& [name, info] : by_name_) names.push_back(name);
  return names;
}

}  // namespace deepinfer
