// Minimal NumPy .npy (format 1.0) writer and reader for 2-D little-endian float32 arrays:
// logits dumps for comparison against references, and golden data in tests.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace deepinfer {

struct NpyArray {
  std::vector<size_t> shape;
  std::vector<float> values;
};

void WriteNpyFloat32(const std::string& path, const std::vector<size_t>& shape, const float* data);
// Reads '<f4' arrays (and '<f8', converted); throws Error on anything else.
NpyArray ReadNpyFloat32(const std::string& path);

}  // namespace deepinfer
