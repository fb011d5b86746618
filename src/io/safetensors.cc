#include "io/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"

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
// and parsing it would only burn memory on hostile input.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Keeps each message to one line and a sane length, whatever bytes a hostile header puts in a name or
// whatever the JSON parser echoes back from the input.
std::string Printable(std::string_view text, size_t max_chars = 200) {
  std::string out;
  for (const char c : text) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto byte = static_cast<unsigned char>(c);
    out += (byte < 0x20 || byte >= 0x7f) ? '?' : c;
  }
  return out;
}

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
                      Printable(dim.dump()));
    }
  }

  const Json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw MakeError(where, ": \"data_offsets\" must be [begin, end] with non-negative integers, got ",
                    Printable(offsets.dump()));
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

// Reads a directory's *.safetensors files (following symlinks, as the Hugging Face cache uses them), sorted.
std::vector<std::string> SafetensorsFilesIn(const fs::path& dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::error_code type_ec;
    if (p.extension() == ".safetensors" && fs::is_regular_file(p, type_ec)) paths.push_back(p.string());
  }
  if (ec) throw MakeError(dir.string(), ": cannot list directory: ", ec.message());
  std::sort(paths.begin(), paths.end());
  return paths;
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

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(std::make_unique<MappedFile>(path)) {
  const uint8_t* bytes = file_->data();
  const uint64_t file_size = file_->size();

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

  // nlohmann keeps only the last of duplicate keys; a duplicated tensor name would silently shadow the first
  // tensor, so duplicates of top-level keys are recorded during the parse and rejected.
  std::set<std::string> seen_keys;
  std::string duplicate;
  Json header;
  try {
    const char* begin = reinterpret_cast<const char*>(bytes + 8);
    header = Json::parse(begin, begin + header_len, [&](int depth, Json::parse_event_t event, Json& parsed) {
      if (event == Json::parse_event_t::key && depth == 1 && parsed.is_string() && duplicate.empty()) {
        if (!seen_keys.insert(parsed.get<std::string>()).second) duplicate = parsed.get<std::string>();
      }
      return true;
    });
  } catch (const Json::parse_error& e) {
    // what() starts with "[json.exception.parse_error.NNN] "; the rest (position and reason) is the useful part.
    std::string_view message = e.what();
    if (const size_t pos = message.find("] "); pos != std::string_view::npos) message.remove_prefix(pos + 2);
    throw MakeError(path, ": header is not valid JSON: ", Printable(message));
  } catch (const Json::exception& e) {
    throw MakeError(path, ": header is not valid JSON: ", Printable(e.what()));
  }
  if (!header.is_object()) throw MakeError(path, ": header is not a JSON object (got ", header.type_name(), ")");
  if (!duplicate.empty()) throw MakeError(path, ": key ", Quoted(duplicate), " appears twice in the header");

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
        metadata_[key] = item.get<std::string>();
      }
      continue;
    }
    entries.push_back(ParseEntry(path + ": tensor " + Quoted(name), name, value));
  }

  // Overlap check on entries sorted by start; zero-byte tensors occupy nothing and overlap nothing.
  std::vector<const Entry*> by_offset;
  by_offset.reserve(entries.size());
  for (const Entry& entry : entries) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  const Entry* furthest = nullptr;  // the non-empty tensor reaching furthest so far
  bool packed = true;               // tensors tile [0, furthest end) without holes, as writers lay them out
  for (const Entry* entry : by_offset) {
    if (entry->begin == entry->end) continue;
    if (furthest != nullptr && entry->begin < furthest->end) {
      throw MakeError(path, ": tensors ", Quoted(furthest->name), " ", OffsetsString(furthest->begin, furthest->end),
                      " and ", Quoted(entry->name), " ", OffsetsString(entry->begin, entry->end), " overlap");
    }
    if (entry->begin != (furthest == nullptr ? 0 : furthest->end)) packed = false;
    furthest = entry;
  }

  // Bounds: a header that lays its tensors out contiguously but ends past the data is a cut-off download or
  // copy, which deserves a different hint than a header with one nonsense offset.
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  for (const Entry* entry : by_offset) {
    if (entry->end <= data_size) continue;
    if (packed && entry->begin != entry->end) {
      throw MakeError(path, ": truncated: tensor ", Quoted(entry->name), " data_offsets ",
                      OffsetsString(entry->begin, entry->end), " but the data section has only ", data_size,
                      " bytes (file is ", file_size, " bytes, the header describes ", data_start + furthest->end, ")");
    }
    throw MakeError(path, ": tensor ", Quoted(entry->name), ": data_offsets ", OffsetsString(entry->begin, entry->end),
                    " end beyond the data section (", data_size, " bytes)");
  }

  tensors_.reserve(entries.size());
  for (Entry& entry : entries) {
    TensorInfo info;
    info.name = std::move(entry.name);
    info.dtype = entry.dtype;
    info.shape = std::move(entry.shape);
    info.data = bytes + data_start + entry.begin;
    info.nbytes = static_cast<size_t>(entry.end - entry.begin);
    info.file = path;
    tensors_.push_back(std::move(info));
  }
}

Checkpoint Checkpoint::Open(const std::string& path) {
  Checkpoint checkpoint;
  // Tensor names are unique across the checkpoint: a second copy would make Find ambiguous.
  auto add_file = [&checkpoint](const std::string& file_path) -> const SafetensorsFile& {
    auto file = std::make_shared<SafetensorsFile>(file_path);
    for (const TensorInfo& info : file->tensors()) {
      const auto [it, inserted] = checkpoint.by_name_.emplace(info.name, &info);
      if (!inserted) {
        throw MakeError("tensor ", Quoted(info.name), " appears in two files: ", it->second->file, " and ", file_path);
      }
    }
    checkpoint.files_.push_back(file);
    checkpoint.file_paths_.push_back(file_path);
    return *file;
  };

  std::error_code ec;
  const fs::path root(path);
  const fs::file_status status = fs::status(root, ec);
  if (ec || !fs::exists(status)) throw MakeError(path, ": no such file or directory");

  fs::path index_path;
  if (fs::is_directory(status)) {
    index_path = root / "model.safetensors.index.json";
    if (!fs::exists(index_path, ec)) {
      const std::vector<std::string> files = SafetensorsFilesIn(root);
      if (files.empty()) {
        throw MakeError(path, ": no model.safetensors.index.json and no *.safetensors files in the directory");
      }
      for (const std::string& file : files) add_file(file);
      return checkpoint;
    }
  } else if (path.ends_with(".index.json")) {
    index_path = root;  // accepted so a caller can point at the index itself
  } else {
    add_file(path);
    return checkpoint;
  }

  const std::string index = index_path.string();
  const MappedFile index_file(index);
  Json parsed;
  try {
    const char* begin = reinterpret_cast<const char*>(index_file.data());
    parsed = Json::parse(begin, begin + index_file.size());
  } catch (const Json::exception& e) {
    std::string_view message = e.what();
    if (const size_t pos = message.find("] "); pos != std::string_view::npos) message.remove_prefix(pos + 2);
    throw MakeError(index, ": not valid JSON: ", Printable(message));
  }
  if (!parsed.is_object() || !parsed.contains("weight_map") || !parsed["weight_map"].is_object()) {
    throw MakeError(index, ": expected a JSON object with a \"weight_map\" object");
  }
  // shard file name -> tensors the index places there; std::map so shards open once and in a stable order.
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [tensor, shard] : parsed["weight_map"].items()) {
    if (!shard.is_string()) {
      throw MakeError(index, ": weight_map entry for ", Quoted(tensor), " must be a file name string, got ",
                      shard.type_name());
    }
    shards[shard.get<std::string>()].push_back(tensor);
  }
  if (shards.empty()) throw MakeError(index, ": weight_map is empty");
  const fs::path dir = index_path.parent_path();
  for (const auto& [shard, tensors] : shards) {
    const fs::path shard_path = dir / shard;
    if (!fs::exists(shard_path, ec)) {
      throw MakeError(index, ": shard ", Quoted(shard), " (listed for tensor ", Quoted(tensors.front()),
                      ") does not exist: ", shard_path.string());
    }
    const SafetensorsFile& file = add_file(shard_path.string());
    std::set<std::string_view> present;
    for (const TensorInfo& info : file.tensors()) present.insert(info.name);
    for (const std::string& tensor : tensors) {
      if (!present.contains(tensor)) {
        throw MakeError(index, ": tensor ", Quoted(tensor), " is mapped to shard ", Quoted(shard),
                        " but that file does not contain it: ", file.path());
      }
    }
  }
  return checkpoint;
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
