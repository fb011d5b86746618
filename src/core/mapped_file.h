// A read-only memory mapping of a whole file. Weights are used in place from the mapping:
// there is no conversion step and no copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace deepinfer {

class MappedFile {
 public:
  // Throws deepinfer::Error naming the path and the OS error.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace deepinfer
