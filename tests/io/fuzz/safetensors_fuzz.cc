// libFuzzer target: arbitrary bytes as a whole safetensors file. Parsing must end in a layout or
// a deepinfer::Error, never a crash, a hang or a read outside the bytes; an accepted layout must
// be consistent (each tensor's size is its shape times its dtype, and the tensors tile the data).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../../fuzz_check.h"
#include "core/error.h"
#include "io/safetensors.h"

using deepinfer::FuzzCheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that ASan sees any read past the end.
  const std::vector<uint8_t> bytes(data, data + size);
  deepinfer::SafetensorsLayout layout;
  try {
    layout = deepinfer::ParseSafetensorsLayout(bytes.data(), bytes.size(), "fuzz.safetensors");
  } catch (const deepinfer::Error&) {
    return 0;
  }
  std::vector<std::pair<size_t, size_t>> spans;
  unsigned sum = 0;
  for (const deepinfer::TensorInfo& t : layout.tensors) {
    FuzzCheck(t.nbytes == static_cast<size_t>(t.numel()) * deepinfer::DTypeSize(t.dtype), "size != numel x dtype");
    const size_t begin = static_cast<size_t>(t.data - bytes.data());
    FuzzCheck(begin <= bytes.size() && t.nbytes <= bytes.size() - begin, "tensor outside the file");
    for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    spans.emplace_back(begin, begin + t.nbytes);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) FuzzCheck(spans[i].first == spans[i - 1].second, "tensors do not tile");
  if (!spans.empty()) FuzzCheck(spans.back().second == bytes.size(), "data section not covered");
  return static_cast<int>(sum & 0);
}
