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
#include <unordered_set>
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
// model.safetensors.index.json: DeepSeek-V3's lists ~92k tensors in ~9 MB; it nests two levels. The
// DOM of a hostile 32 MiB index (millions of tiny entries) peaks at ~650 MB.
constexpr JsonLimits kIndexLimits{32 << 20, 2 + 64};
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

// The checks on one entry's own fields, once it is read. `where` is "<path>: tensor '<name>'".
void CheckEntry(const std::string& where, const Entry& entry) {
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
}

// PyTorch and NumPy stop at 64 dimensions; a longer shape is not a checkpoint tensor.
constexpr size_t kMaxDims = 64;

// Reads the header as it streams (SaxParseBounded): one Entry per tensor and never a DOM of the
// whole header, so a 100 MB header costs about what its entries hold rather than ~20x its size,
// and 100k entries parse in linear time. Each entry's own fields are checked here (as soon as a
// value is seen, or at the end of the entry); the layout across entries is checked afterwards.
class HeaderReader {
 public:
  explicit HeaderReader(const std::string& path) : path_(path) {}

  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
  const std::string& error() const { return error_; }

  bool null() { return Scalar("null", Json()); }
  bool boolean(bool value) { return Scalar("boolean", Json(value)); }
  bool number_integer(int64_t value) {
    if (at_ == At::kShape) return Fail(where_, ": negative dimension ", value, " in \"shape\"");
    return Scalar("number", Json(value));
  }
  bool number_unsigned(uint64_t value) {
    if (at_ != At::kShape) return Scalar("number", Json(value));
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Fail(where_, ": shape dimension ", value, " is too large");
    }
    if (entry_.shape.size() == kMaxDims) return Fail(where_, ": \"shape\" has more than ", kMaxDims, " dimensions");
    entry_.shape.push_back(static_cast<int64_t>(value));
    return true;
  }
  bool number_float(double value, const std::string&) { return Scalar("number", Json(value)); }
  bool string(std::string& value) {
    if (at_ == At::kMetadata) {
      metadata[std::move(key_)] = std::move(value);
      return true;
    }
    if (at_ == At::kEntry && field_ == Field::kDType) {
      const std::optional<DType> parsed = ParseDType(value);
      if (!parsed) {
        return Fail(where_, ": unsupported dtype ", Quoted(value), " (supported: ", SupportedDTypes(), ")");
      }
      entry_.dtype = *parsed;
      return true;
    }
    return Scalar("string", Json(value.substr(0, 100)));
  }

  bool key(std::string& key) {
    switch (at_) {
      case At::kRoot:
        if (!names_.insert(key).second) return Fail(path_, ": tensor ", Quoted(key), " appears twice in the header");
        where_ = path_ + ": tensor " + Quoted(key);
        key_ = std::move(key);
        return true;
      case At::kMetadata:
        if (metadata.contains(key)) return Fail(path_, ": \"__metadata__\" key ", Quoted(key), " appears twice");
        key_ = std::move(key);
        return true;
      case At::kEntry:
        field_ = key == "dtype"          ? Field::kDType
                 : key == "shape"        ? Field::kShape
                 : key == "data_offsets" ? Field::kOffsets
                                         : Field::kOther;  // ignored, as by the reference library
        if (field_ != Field::kOther) {
          if (seen_[static_cast<int>(field_)]) return Fail(where_, ": \"", key, "\" appears twice");
          seen_[static_cast<int>(field_)] = true;
        }
        return true;
      default:
        return true;  // keys of a skipped value
    }
  }

  bool start_object(size_t) {
    switch (at_) {
      case At::kTop:
        at_ = At::kRoot;
        return true;
      case At::kRoot:
        if (key_ == "__metadata__") {
          at_ = At::kMetadata;
          return true;
        }
        at_ = At::kEntry;
        entry_ = Entry{};
        entry_.name = key_;
        seen_[0] = seen_[1] = seen_[2] = false;
        field_ = Field::kOther;
        return true;
      default:
        return Container("object");
    }
  }
  bool start_array(size_t) {
    if (at_ == At::kEntry && field_ == Field::kShape) {
      at_ = At::kShape;
      return true;
    }
    if (at_ == At::kEntry && field_ == Field::kOffsets) {
      at_ = At::kOffsets;
      offsets_ = Json::array();
      return true;
    }
    return Container("array");
  }
  bool end_object() {
    if (at_ == At::kSkip) return Leave();
    if (at_ == At::kMetadata) {
      at_ = At::kRoot;
      return true;
    }
    if (at_ == At::kRoot) {
      at_ = At::kDone;
      return true;
    }
    return FinishEntry();
  }
  bool end_array() {
    if (at_ == At::kSkip) return Leave();
    if (at_ == At::kShape) {
      at_ = At::kEntry;
      return true;
    }
    // data_offsets
    at_ = At::kEntry;
    if (offsets_.size() != 2 || !offsets_[0].is_number_unsigned() || !offsets_[1].is_number_unsigned()) {
      return BadOffsets(BoundedDump(offsets_, 100));
    }
    entry_.begin = offsets_[0].get<uint64_t>();
    entry_.end = offsets_[1].get<uint64_t>();
    return true;
  }

 private:
  enum class At { kTop, kRoot, kEntry, kMetadata, kShape, kOffsets, kSkip, kDone };
  enum class Field { kDType, kShape, kOffsets, kOther };

  template <typename... Args>
  bool Fail(const Args&... args) {
    error_ = detail::Concat(args...);
    return false;
  }
  bool BadOffsets(const std::string& got) {
    return Fail(where_, ": \"data_offsets\" must be [begin, end] with non-negative integers, got ", Printable(got));
  }

  // Where any value but the expected one is wrong: the message for a `type` value there, or
  // nullopt where a value of that type may be fine.
  std::optional<std::string> Misplaced(const char* type) const {
    switch (at_) {
      case At::kTop:
        return detail::Concat(path_, ": header is not a JSON object (got ", type, ")");
      case At::kRoot:
        if (key_ == "__metadata__")
          return detail::Concat(path_, ": \"__metadata__\" must be a JSON object, got ", type);
        return detail::Concat(where_, ": entry must be a JSON object, got ", type);
      case At::kMetadata:
        return detail::Concat(path_, ": \"__metadata__\" value for ", Quoted(key_), " must be a string, got ", type);
      case At::kEntry:
        if (field_ == Field::kDType) return detail::Concat(where_, ": \"dtype\" must be a string, got ", type);
        if (field_ == Field::kShape)
          return detail::Concat(where_, ": \"shape\" must be an array of integers, got ", type);
        return std::nullopt;
      default:
        return std::nullopt;
    }
  }

  // A value that is not an object or array, where the reader is.
  bool Scalar(const char* type, const Json& value) {
    if (const std::optional<std::string> message = Misplaced(type)) return Fail(*message);
    switch (at_) {
      case At::kEntry:
        return field_ == Field::kOffsets ? BadOffsets(BoundedDump(value, 100)) : true;  // else an ignored field
      case At::kShape:
        return Fail(where_, ": \"shape\" must be an array of integers, found ", type, " ",
                    Printable(BoundedDump(value, 100)));
      case At::kOffsets:
        if (offsets_.size() < 3) offsets_.push_back(value);  // enough to show what is wrong
        return true;
      default:
        return true;
    }
  }

  // An object or array where the reader is not expecting one (the root is handled above).
  bool Container(const char* type) {
    if (const std::optional<std::string> message = Misplaced(type)) return Fail(*message);
    switch (at_) {
      case At::kEntry:
        if (field_ == Field::kOffsets) return BadOffsets(type);
        skip_depth_ = 1;  // an ignored field's value
        at_ = At::kSkip;
        return true;
      case At::kShape:
        return Fail(where_, ": \"shape\" must be an array of integers, found ", type);
      case At::kOffsets:
        return BadOffsets(std::string("a nested ") + type);
      case At::kSkip:
        ++skip_depth_;
        return true;
      default:
        return true;
    }
  }
  bool Leave() {
    if (--skip_depth_ == 0) at_ = At::kEntry;
    return true;
  }

  bool FinishEntry() {
    at_ = At::kRoot;
    const char* names[] = {"dtype", "shape", "data_offsets"};
    for (int i = 0; i < 3; ++i) {
      if (!seen_[i]) return Fail(where_, ": missing \"", names[i], "\"");
    }
    try {
      CheckEntry(where_, entry_);
    } catch (const Error& e) {
      return Fail(e.what());
    }
    entries.push_back(std::move(entry_));
    return true;
  }

  const std::string& path_;
  At at_ = At::kTop;
  std::string key_;    // the current top-level or metadata key
  std::string where_;  // "<path>: tensor '<name>'"
  Entry entry_;
  Field field_ = Field::kOther;
  bool seen_[3] = {false, false, false};
  Json offsets_;
  int skip_depth_ = 0;
  std::unordered_set<std::string> names_;
  std::string error_;
};

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

  HeaderReader reader(path);
  SaxParseBounded(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len), path + ": header",
                  kHeaderLimits, reader);
  SafetensorsLayout layout;
  layout.metadata = std::move(reader.metadata);
  std::vector<Entry>& entries = reader.entries;

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
