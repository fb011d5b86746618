#include "io/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

#include "core/error.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The byte size of a declaration, or an error naming the file and the tensor.
uint64_t CheckedBytes(const std::string& path, const TensorSpec& spec) {
  uint64_t count = 1;
  for (const int64_t dim : spec.shape) {
    if (dim < 0)
      throw MakeError(path, ": tensor '", spec.name, "': negative dimension in shape ", ShapeText(spec.shape));
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dim), &count) ||
        count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw MakeError(path, ": tensor '", spec.name, "': shape ", ShapeText(spec.shape),
                      " overflows the element count");
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(DTypeSize(spec.dtype)), &bytes)) {
    throw MakeError(path, ": tensor '", spec.name, "': shape ", ShapeText(spec.shape), " of ", DTypeName(spec.dtype),
                    " overflows the byte size");
  }
  return bytes;
}

std::string OsError(int error) { return std::strerror(error); }

}  // namespace

uint64_t TensorSpec::nbytes() const {
  uint64_t count = 1;
  for (const int64_t dim : shape) count *= static_cast<uint64_t>(dim);
  return count * DTypeSize(dtype);
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorSpec> tensors,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  // Validate everything before touching the file system.
  std::set<std::string_view> names;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  offsets_.reserve(tensors_.size());
  for (const TensorSpec& spec : tensors_) {
    if (spec.name.empty()) throw MakeError(path_, ": a tensor has an empty name");
    if (spec.name == "__metadata__") throw MakeError(path_, ": '__metadata__' is reserved and cannot name a tensor");
    if (!names.insert(spec.name).second) throw MakeError(path_, ": tensor '", spec.name, "' is declared twice");
    const uint64_t bytes = CheckedBytes(path_, spec);
    if (__builtin_add_overflow(data_bytes_, bytes, &data_bytes_)) {
      throw MakeError(path_, ": the tensors' total size overflows 64 bits");
    }
    offsets_.push_back(data_bytes_ - bytes);
    header[spec.name] = {
        {"dtype", DTypeName(spec.dtype)}, {"shape", spec.shape}, {"data_offsets", {data_bytes_ - bytes, data_bytes_}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  data_start_ = 8 + text.size();
  if (data_bytes_ > std::numeric_limits<uint64_t>::max() - data_start_) {
    throw MakeError(path_, ": the file size overflows 64 bits");
  }

  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw MakeError(path_, ": cannot create: ", OsError(errno));
  try {
    if (::ftruncate(fd_, static_cast<off_t>(data_start_ + data_bytes_)) != 0) {
      throw MakeError(path_, ": cannot size the file to ", data_start_ + data_bytes_, " bytes: ", OsError(errno));
    }
    std::vector<uint8_t> prefix(8 + text.size());
    const uint64_t length = text.size();
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(length >> (8 * i));
    std::memcpy(prefix.data() + 8, text.data(), text.size());
    WriteAt(0, prefix);
  } catch (...) {
    Abandon();
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!finished_) Abandon();
}

void SafetensorsWriter::Abandon() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(path_.c_str());
  }
}

void SafetensorsWriter::CheckOpen(const char* what) const {
  if (finished_) throw MakeError(path_, ": ", what, " after Finish()");
  if (fd_ < 0) throw MakeError(path_, ": ", what, " on a writer whose file was abandoned after an error");
}

void SafetensorsWriter::WriteAt(uint64_t file_offset, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(file_offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw MakeError(path_, ": write of ", bytes.size(), " bytes at offset ", file_offset,
                      " failed: ", OsError(errno));
    }
    if (n == 0) throw MakeError(path_, ": write at offset ", file_offset + done, " made no progress");
    done += static_cast<size_t>(n);
  }
}

void SafetensorsWriter::WriteNext(std::string_view name, const ChunkFiller& fill, size_t chunk_bytes) {
  CheckOpen("WriteNext");
  if (next_ >= tensors_.size()) {
    throw MakeError(path_, ": WriteNext('", name, "') but all ", tensors_.size(), " declared tensors are written");
  }
  const TensorSpec& spec = tensors_[next_];
  if (name != spec.name) {
    throw MakeError(path_, ": WriteNext('", name, "') out of order: the next declared tensor is '", spec.name, "'");
  }
  if (chunk_bytes == 0) throw MakeError(path_, ": chunk size must be positive");
  const uint64_t total = spec.nbytes();
  std::vector<uint8_t> buffer(static_cast<size_t>(std::min<uint64_t>(chunk_bytes, total)));
  for (uint64_t offset = 0; offset < total; offset += chunk_bytes) {
    const std::span<uint8_t> chunk(buffer.data(), static_cast<size_t>(std::min<uint64_t>(chunk_bytes, total - offset)));
    fill(offset, chunk);
    WriteAt(data_start_ + offsets_[next_] + offset, chunk);
  }
  ++next_;
}

void SafetensorsWriter::WriteAll(const TensorFiller& fill, int threads, size_t chunk_bytes) {
  CheckOpen("WriteAll");
  if (chunk_bytes == 0) throw MakeError(path_, ": chunk size must be positive");
  struct Chunk {
    size_t tensor;
    uint64_t offset;
    size_t size;
  };
  std::vector<Chunk> chunks;
  for (size_t t = next_; t < tensors_.size(); ++t) {
    const uint64_t total = tensors_[t].nbytes();
    for (uint64_t offset = 0; offset < total; offset += chunk_bytes) {
      chunks.push_back({t, offset, static_cast<size_t>(std::min<uint64_t>(chunk_bytes, total - offset))});
    }
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(chunks.size(), 1)));

  // A pipeline: `threads` workers fill chunks into a ring of buffers, taking chunk numbers
  // from a shared counter; this thread writes them in file order. One writer keeps the file
  // system from serializing concurrent writes on the file's lock (on ext4, parallel pwrite
  // to one file is slower than a single writer), and generation overlaps the writes.
  const size_t slots = 2 * static_cast<size_t>(threads);
  std::vector<std::vector<uint8_t>> buffers(slots);
  std::vector<char> ready(slots, 0);  // per slot: the chunk in it is filled
  std::mutex mutex;
  std::condition_variable changed;
  size_t next_chunk = 0;  // the next chunk a worker takes
  size_t written = 0;     // chunks written so far
  bool failed = false;
  std::exception_ptr error;
  auto fail = [&](std::exception_ptr e) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!error) error = e;
    failed = true;
    changed.notify_all();
  };
  auto work = [&] {
    for (;;) {
      size_t i = 0;
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (failed || next_chunk >= chunks.size()) return;
        i = next_chunk++;
        // Slot i % slots is free once chunk i - slots is written.
        changed.wait(lock, [&] { return failed || written + slots > i; });
        if (failed) return;
      }
      const Chunk& c = chunks[i];
      std::vector<uint8_t>& buffer = buffers[i % slots];
      try {
        buffer.resize(c.size);
        fill(c.tensor, tensors_[c.tensor], c.offset, std::span<uint8_t>(buffer.data(), c.size));
      } catch (...) {
        fail(std::current_exception());
        return;
      }
      const std::lock_guard<std::mutex> lock(mutex);
      ready[i % slots] = 1;
      changed.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (size_t i = 0; i < chunks.size(); ++i) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return failed || ready[i % slots] != 0; });
      if (failed) break;
    }
    const Chunk& c = chunks[i];
    try {
      WriteAt(data_start_ + offsets_[c.tensor] + c.offset, std::span<const uint8_t>(buffers[i % slots].data(), c.size));
    } catch (...) {
      fail(std::current_exception());
      break;
    }
    const std::lock_guard<std::mutex> lock(mutex);
    ready[i % slots] = 0;
    ++written;
    changed.notify_all();
  }
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  next_ = tensors_.size();
}

void SafetensorsWriter::Finish() {
  CheckOpen("Finish");
  if (next_ != tensors_.size()) {
    throw MakeError(path_, ": Finish() after ", next_, " of ", tensors_.size(), " tensors; '", tensors_[next_].name,
                    "' and the ones after it have no data");
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(path_.c_str());
    throw MakeError(path_, ": close failed: ", OsError(error));
  }
  finished_ = true;
}

void WriteSafetensorsFile(const std::string& path, const std::vector<TensorSpec>& tensors, const TensorFiller& fill,
                          const std::map<std::string, std::string>& metadata, int threads) {
  SafetensorsWriter writer(path, tensors, metadata);
  writer.WriteAll(fill, threads);
  writer.Finish();
}

std::vector<std::vector<size_t>> PlanShards(const std::vector<TensorSpec>& tensors, uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  uint64_t current = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t bytes = tensors[i].nbytes();
    if (shards.empty() || (max_shard_bytes > 0 && current > 0 && current + bytes > max_shard_bytes)) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += bytes;
  }
  return shards;
}

CheckpointFiles WriteSafetensorsCheckpoint(const std::string& dir, const std::vector<TensorSpec>& tensors,
                                           const TensorFiller& fill, uint64_t max_shard_bytes,
                                           const std::map<std::string, std::string>& metadata, int threads) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw MakeError(dir, ": not a directory");
  if (tensors.empty()) throw MakeError(dir, ": a checkpoint needs at least one tensor");
  const std::vector<std::vector<size_t>> shards = PlanShards(tensors, max_shard_bytes);
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  CheckpointFiles result;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    if (shards.size() == 1) {
      std::snprintf(name, sizeof(name), "model.safetensors");
    } else {
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    }
    // Largest element size first: with the 8-aligned data start, every tensor is then aligned
    // to its element size.
    std::vector<size_t> order = shards[s];
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return DTypeSize(tensors[a].dtype) > DTypeSize(tensors[b].dtype); });
    std::vector<TensorSpec> specs;
    for (const size_t i : order) {
      specs.push_back(tensors[i]);
      weight_map[tensors[i].name] = name;
      result.total_bytes += tensors[i].nbytes();
    }
    const std::string path = (fs::path(dir) / name).string();
    WriteSafetensorsFile(
        path, specs,
        [&](size_t local, const TensorSpec& spec, uint64_t offset, std::span<uint8_t> out) {
          fill(order[local], spec, offset, out);
        },
        metadata, threads);
    result.files.push_back(path);
  }
  if (shards.size() == 1) {
    fs::remove(index_path, ec);  // a stale index would hide the single file from readers
    if (ec) throw MakeError(index_path.string(), ": cannot remove the stale index: ", ec.message());
    return result;
  }
  const nlohmann::json index = {{"metadata", {{"total_size", result.total_bytes}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  const std::string tmp = index_path.string() + ".tmp";
  FILE* out = std::fopen(tmp.c_str(), "wb");
  if (out == nullptr) throw MakeError(tmp, ": cannot create: ", OsError(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  if (std::fclose(out) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw MakeError(tmp, ": write failed");
  }
  fs::rename(tmp, index_path, ec);
  if (ec) throw MakeError(index_path.string(), ": cannot move the index into place: ", ec.message());
  result.index = index_path.string();
  return result;
}

}  // namespace deepinfer
