// Streaming safetensors writer: multi-gigabyte checkpoints without holding a tensor in memory.
//
// Every tensor (name, dtype, shape) is declared up front, so the header, the 8-byte
// little-endian length followed by the JSON text padded with spaces to a multiple of 8, is
// written first. The data follow in declaration order, laid out contiguously with no gaps,
// as the `safetensors` library writes them. Data are produced by a callback that fills one
// chunk at a time; WriteAll can run that callback on several threads at once while the calling
// thread writes the filled chunks in file order, so a generator that derives each chunk from
// (tensor, offset) alone produces the same file whatever the thread count.
//
// Every error is a deepinfer::Error naming the file. A writer destroyed before Finish()
// removes its partial file, so a failed run never leaves a file that looks complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace deepinfer {

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;

  // Element count times the dtype size; the declaration checks rule out overflow.
  uint64_t nbytes() const;
};

// Fills `out` with the bytes [offset, offset + out.size()) of one tensor. Chunks of a tensor
// are requested in increasing offset order by WriteNext; WriteAll may request them out of
// order and concurrently (different chunks on different threads).
using ChunkFiller = std::function<void(uint64_t offset, std::span<uint8_t> out)>;
// The same for any declared tensor: `index` is its position in the declaration list.
using TensorFiller = std::function<void(size_t index, const TensorSpec& spec, uint64_t offset, std::span<uint8_t> out)>;

class SafetensorsWriter {
 public:
  static constexpr size_t kDefaultChunkBytes = size_t{4} << 20;

  // Validates the declarations (names non-empty, unique, not "__metadata__"; byte sizes fit
  // 64 bits), creates (truncates) `path` and writes the header. `metadata` becomes the
  // header's "__metadata__" object (omitted when empty).
  SafetensorsWriter(std::string path, std::vector<TensorSpec> tensors,
                    std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Writes the data of the next tensor in declaration order; `name` must be that tensor's
  // name (a guard against a caller whose order drifted). `fill` is called for consecutive
  // chunks of at most `chunk_bytes` covering the tensor.
  void WriteNext(std::string_view name, const ChunkFiller& fill, size_t chunk_bytes = kDefaultChunkBytes);

  // Writes the data of every tensor not written yet: `threads` worker threads (<= 0: one per
  // hardware thread) fill chunks, the calling thread writes them in order. Chunk boundaries
  // sit at multiples of `chunk_bytes` from each tensor's start, independent of the thread
  // count. The first exception thrown by `fill` (or by a write) is rethrown.
  void WriteAll(const TensorFiller& fill, int threads = 1, size_t chunk_bytes = kDefaultChunkBytes);

  // Checks that every tensor was written, then closes the file. Throws naming the file.
  void Finish();

  const std::string& path() const { return path_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  uint64_t header_bytes() const { return data_start_; }  // 8 + padded JSON
  uint64_t file_bytes() const { return data_start_ + data_bytes_; }
  size_t written() const { return next_; }  // tensors whose data are complete

 private:
  void CheckOpen(const char* what) const;
  void WriteAt(uint64_t file_offset, std::span<const uint8_t> bytes);
  void Abandon() noexcept;

  std::string path_;
  std::vector<TensorSpec> tensors_;
  std::vector<uint64_t> offsets_;  // data-relative start of each tensor
  uint64_t data_start_ = 0;
  uint64_t data_bytes_ = 0;
  int fd_ = -1;
  size_t next_ = 0;
  bool finished_ = false;
};

// Writes one complete file: header, every tensor's data (filled on `threads` threads), close.
void WriteSafetensorsFile(const std::string& path, const std::vector<TensorSpec>& tensors, const TensorFiller& fill,
                          const std::map<std::string, std::string>& metadata = {}, int threads = 1);

// Splits tensors, in declaration order, into consecutive shards of at most `max_shard_bytes`
// data bytes each (0: no limit, one shard). A tensor larger than the limit gets a shard of its
// own. Returns the declaration indices of each shard.
std::vector<std::vector<size_t>> PlanShards(const std::vector<TensorSpec>& tensors, uint64_t max_shard_bytes);

struct CheckpointFiles {
  std::vector<std::string> files;  // the safetensors files written, in shard order
  std::string index;               // the index path, or empty for a single file
  uint64_t total_bytes = 0;        // sum of the tensors' data bytes
};

// Writes a checkpoint directory Checkpoint::Open reads: one `model.safetensors` when
// everything fits one shard, else `model-0000k-of-0000n.safetensors` shards (PlanShards)
// plus `model.safetensors.index.json` ({"metadata": {"total_size": N}, "weight_map": ...}).
// Inside each file, tensors are laid out by decreasing element size (stable otherwise), so
// every tensor starts at a multiple of its element size. `dir` must exist; files of the same
// names are replaced.
CheckpointFiles WriteSafetensorsCheckpoint(const std::string& dir, const std::vector<TensorSpec>& tensors,
                                           const TensorFiller& fill, uint64_t max_shard_bytes = 0,
                                           const std::map<std::string, std::string>& metadata = {}, int threads = 1);

}  // namespace deepinfer
