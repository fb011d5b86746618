#include "backend/tensor.h"

#include <algorithm>
#include <cstring>

namespace deepinfer {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMinBlockBytes = size_t{1} << 20;
constexpr size_t kTouchStride = 4096;  // the smallest page size

size_t AlignUp(size_t v) { return (v + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

size_t ElementBytes(ElementType dtype) {
  switch (dtype) {
    case ElementType::kF32:
    case ElementType::kI32:
      return 4;
    case ElementType::kI64:
      return 8;
    case ElementType::kU8:
      return 1;
  }
  return 0;
}

const char* ElementTypeName(ElementType dtype) {
  switch (dtype) {
    case ElementType::kF32:
      return "f32";
    case ElementType::kI32:
      return "i32";
    case ElementType::kI64:
      return "i64";
    case ElementType::kU8:
      return "u8";
  }
  return "?";
}

Tensor Tensor::Contiguous(ElementType dtype, Device device, std::initializer_list<int64_t> shape, void* data) {
  DI_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), "tensor rank ", shape.size(), " above ", kMaxRank);
  Tensor t;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), t.shape.begin());
  int64_t stride = 1;
  for (int axis = t.rank - 1; axis >= 0; --axis) {
    DI_CHECK(t.shape[axis] >= 0, "negative tensor dimension ", t.shape[axis]);
    t.strides[axis] = stride;
    stride *= t.shape[axis];
  }
  t.data = data;
  return t;
}

int64_t Tensor::elements() const {
  int64_t n = 1;
  for (int axis = 0; axis < rank; ++axis) n *= shape[axis];
  return n;
}

bool Tensor::contiguous() const {
  int64_t stride = 1;
  for (int axis = rank - 1; axis >= 0; --axis) {
    if (shape[axis] != 1 && strides[axis] != stride) return false;
    stride *= shape[axis];
  }
  return true;
}

Tensor Tensor::Rows(int64_t begin, int64_t count) const {
  DI_CHECK(rank >= 1 && begin >= 0 && count >= 0 && begin + count <= shape[0], "rows [", begin, ", ", begin + count,
           ") of a tensor of ", rank >= 1 ? shape[0] : 0);
  Tensor t = *this;
  t.shape[0] = count;
  t.data = static_cast<std::byte*>(data) + begin * strides[0] * static_cast<int64_t>(ElementBytes(dtype));
  return t;
}

Tensor Tensor::Reshaped(std::initializer_list<int64_t> new_shape) const {
  DI_CHECK(contiguous(), "reshape of a strided tensor");
  Tensor t = Contiguous(dtype, device, new_shape, data);
  DI_CHECK(t.elements() == elements(), "reshape of ", elements(), " elements to ", t.elements());
  return t;
}

Tensor Tensor::Elements(int64_t begin, int64_t count) const {
  DI_CHECK(contiguous(), "element range of a strided tensor");
  DI_CHECK(begin >= 0 && count >= 0 && begin + count <= elements(), "elements [", begin, ", ", begin + count,
           ") of a tensor of ", elements());
  return Contiguous(dtype, device, {count},
                    static_cast<std::byte*>(data) + begin * static_cast<int64_t>(ElementBytes(dtype)));
}

Tensor Workspace::Take(ElementType dtype, std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::Contiguous(dtype, device_, shape, nullptr);
  t.data = Allocate(static_cast<size_t>(t.elements()) * ElementBytes(dtype));
  return t;
}

Tensor Workspace::TakeZeroed(ElementType dtype, std::initializer_list<int64_t> shape) {
  Tensor t = Take(dtype, shape);
  std::memset(t.data, 0, static_cast<size_t>(t.elements()) * ElementBytes(dtype));
  return t;
}

void* Workspace::Allocate(size_t bytes) {
  bytes = AlignUp(std::max<size_t>(bytes, 1));
  used_total_ += bytes;
  high_water_ = std::max(high_water_, used_total_);
  while (current_ < blocks_.size() && blocks_[current_].used + bytes > blocks_[current_].size) {
    if (current_ + 1 == blocks_.size()) break;
    ++current_;
  }
  if (blocks_.empty() || blocks_[current_].used + bytes > blocks_[current_].size) {
    Block block;
    block.size = std::max({bytes, kMinBlockBytes, blocks_.empty() ? size_t{0} : blocks_.back().size});
    block.memory = std::make_unique_for_overwrite<std::byte[]>(block.size + kAlignment);
    blocks_.push_back(std::move(block));
    current_ = blocks_.size() - 1;
  }
  Block& block = blocks_[current_];
  const uintptr_t base = AlignUp(reinterpret_cast<uintptr_t>(block.memory.get()));
  void* p = reinterpret_cast<void*>(base + block.used);
  block.used += bytes;
  return p;
}

void Workspace::Reset() {
  if (blocks_.size() > 1) {
    // Fold into one block of the high-water size: later steps of this shape fit in it.
    blocks_.clear();
    Block block;
    block.size = AlignUp(high_water_);
    block.memory = std::make_unique_for_overwrite<std::byte[]>(block.size + kAlignment);
    // Fault every page in now, at the end of a step: otherwise the next step, the first to run
    // in the new block, takes all its page faults and page zeroing.
    for (size_t offset = 0; offset < block.size + kAlignment; offset += kTouchStride) block.memory[offset] = {};
    blocks_.push_back(std::move(block));
  }
  for (Block& block : blocks_) block.used = 0;
  current_ = 0;
  used_total_ = 0;
}

Workspace::Mark Workspace::Save() const {
  return {current_, blocks_.empty() ? 0 : blocks_[current_].used, used_total_};
}

void Workspace::Rewind(const Mark& mark) {
  for (size_t b = mark.block + 1; b < blocks_.size(); ++b) blocks_[b].used = 0;
  if (!blocks_.empty()) blocks_[mark.block].used = mark.used;
  current_ = mark.block;
  used_total_ = mark.used_total;
}

uint64_t Workspace::held_bytes() const {
  uint64_t total = 0;
  for (const Block& block : blocks_) total += block.size;
  return total;
}

}  // namespace deepinfer
