// A read-only memory mapping of a whole file. Weights are used in place from the mapping:
// there is no conversion step and no copy.
//
// A mapped file that another process truncates afterwards makes reads of the lost pages raise
// SIGBUS. Code that reads mapped weights runs them inside GuardMappedReads (the model's forward
// and loading, and every ThreadPool task), which turns that SIGBUS into a MappedFileFault
// exception; the model names the file (Checkpoint::FileContaining).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/regular_file.h"

namespace deepinfer {

class MappedFile {
 public:
  // Throws deepinfer::Error naming the path and the OS error (see OpenRegularFile).
  explicit MappedFile(const std::string& path);
  // Maps an already opened file (e.g. one ModelDirectory::Open confined to a model directory).
  explicit MappedFile(const FileHandle& file);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool Contains(const void* address) const {
    const auto* p = static_cast<const uint8_t*>(address);
    return data_ != nullptr && p >= data_ && p < data_ + size_;
  }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// A SIGBUS (a mapped page whose file was cut short) inside GuardMappedReads.
class MappedFileFault : public Error {
 public:
  explicit MappedFileFault(const void* address);
  const void* address() const { return address_; }

 private:
  const void* address_;
};

namespace detail {
void GuardMappedReadsImpl(void (*run)(void*), void* context);
}  // namespace detail

// Runs `body()`. A SIGBUS raised on this thread while it runs ends it at once and is thrown as
// MappedFileFault (the frames it abandons are not unwound: locals with destructors leak, so
// keep locks and other invariants out of guarded code). Guards nest; exceptions from `body`
// pass through unchanged. Implementation: one process-wide SIGBUS handler, installed on first
// use, and a thread_local pointer to the innermost guard's jump buffer that is set only while a
// guard runs; a SIGBUS outside every guard gets the previous (default: fatal) action.
template <typename Body>
void GuardMappedReads(Body&& body) {
  detail::GuardMappedReadsImpl([](void* context) { (*static_cast<std::remove_reference_t<Body>*>(context))(); }, &body);
}

}  // namespace deepinfer
