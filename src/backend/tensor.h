// Tensor handles and the per-step workspace arena they come from.
//
// A Tensor names memory a backend owns: its element type, shape, strides (in elements) and the
// device it lives on. It owns nothing; the Workspace that handed it out keeps the memory until
// its next Reset. Every activation of a forward is such a handle, so a backend whose memory is
// not the host's (CUDA) can hand out its own without the model changing.
//
// Thread contract: a Workspace belongs to one forward at a time; Take and Reset are not
// thread-safe. Tensors it handed out may be read and written from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"

namespace deepinfer {

enum class ElementType : uint8_t { kF32, kI32, kI64, kU8 };
enum class Device : uint8_t { kHost };

size_t ElementBytes(ElementType dtype);
const char* ElementTypeName(ElementType dtype);

template <class T>
constexpr ElementType ElementTypeOf();
template <>
constexpr ElementType ElementTypeOf<float>() {
  return ElementType::kF32;
}
template <>
constexpr ElementType ElementTypeOf<int32_t>() {
  return ElementType::kI32;
}
template <>
constexpr ElementType ElementTypeOf<int64_t>() {
  return ElementType::kI64;
}
template <>
constexpr ElementType ElementTypeOf<uint8_t>() {
  return ElementType::kU8;
}

struct Tensor {
  static constexpr int kMaxRank = 4;

  ElementType dtype = ElementType::kF32;
  Device device = Device::kHost;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // elements
  void* data = nullptr;

  // A contiguous row-major tensor over `data`.
  static Tensor Contiguous(ElementType dtype, Device device, std::initializer_list<int64_t> shape, void* data);
  template <class T>
  static Tensor Wrap(std::span<T> values) {  // a host vector as a rank-1 tensor
    return Contiguous(ElementTypeOf<std::remove_const_t<T>>(), Device::kHost, {static_cast<int64_t>(values.size())},
                      const_cast<std::remove_const_t<T>*>(values.data()));
  }

  int64_t dim(int axis) const { return shape[axis]; }
  int64_t elements() const;
  bool contiguous() const;
  // Rows of a row-major matrix view: dim 0, and everything after it as columns.
  int64_t rows() const { return rank == 0 ? 1 : shape[0]; }
  int64_t row_elements() const {
    int64_t n = 1;
    for (int axis = 1; axis < rank; ++axis) n *= shape[axis];
    return n;
  }

  // The elements as T, checking the dtype and that the memory is host-visible and contiguous.
  template <class T>
  T* host() const {
    DI_CHECK(dtype == ElementTypeOf<T>(), "tensor holds ", ElementTypeName(dtype), ", read as ",
             ElementTypeName(ElementTypeOf<T>()));
    DI_CHECK(device == Device::kHost && contiguous(), "tensor is not contiguous host memory");
    return static_cast<T*>(data);
  }
  template <class T>
  T* row(int64_t r) const {
    return host<T>() + r * row_elements();
  }
  // Rows [begin, begin + count) of dim 0 as a tensor of their own.
  Tensor Rows(int64_t begin, int64_t count) const;
  // The same memory with another contiguous shape of as many elements.
  Tensor Reshaped(std::initializer_list<int64_t> shape) const;
  // Elements [begin, begin + count) of a contiguous tensor, as a rank-1 tensor (a column range
  // of one row, say).
  Tensor Elements(int64_t begin, int64_t count) const;
};

// A bump arena: Take hands out 64-byte aligned tensors until Reset. When a step needs more
// than the arena holds, it adds a block; the next Reset folds every block into one of the
// high-water size, so after the first steps of each shape a step takes no heap memory.
class Workspace {
 public:
  explicit Workspace(Device device = Device::kHost) : device_(device) {}

  Tensor Take(ElementType dtype, std::initializer_list<int64_t> shape);
  template <class T>
  Tensor Take(std::initializer_list<int64_t> shape) {
    return Take(ElementTypeOf<T>(), shape);
  }
  // Zero-filled.
  Tensor TakeZeroed(ElementType dtype, std::initializer_list<int64_t> shape);
  // Typed scratch for the caller's own bookkeeping (row lists, pointers); same lifetime.
  template <class T>
  std::span<T> TakeArray(int64_t count) {
    static_assert(std::is_trivially_destructible_v<T>);
    return {static_cast<T*>(Allocate(static_cast<size_t>(count) * sizeof(T))), static_cast<size_t>(count)};
  }

  // Ends the step: every tensor handed out since the last Reset becomes invalid.
  void Reset();

  // Scoped temporaries: what is taken after a Mark is given back by Rewind(mark), in stack order.
  struct Mark {
    size_t block = 0;
    size_t used = 0;
    uint64_t used_total = 0;
  };
  Mark Save() const;
  void Rewind(const Mark& mark);
  // Rewinds when it goes out of scope.
  class Scope {
   public:
    explicit Scope(Workspace& workspace) : workspace_(workspace), mark_(workspace.Save()) {}
    ~Scope() { workspace_.Rewind(mark_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Workspace& workspace_;
    Mark mark_;
  };

  uint64_t held_bytes() const;                         // reserved by the arena
  uint64_t used_bytes() const { return used_total_; }  // handed out this step
  uint64_t high_water_bytes() const { return high_water_; }

 private:
  struct Block {
    std::unique_ptr<std::byte[]> memory;
    size_t size = 0;
    size_t used = 0;
  };
  void* Allocate(size_t bytes);

  Device device_;
  std::vector<Block> blocks_;
  size_t current_ = 0;  // the block Allocate takes from; later ones are empty
  uint64_t used_total_ = 0;
  uint64_t high_water_ = 0;
};

}  // namespace deepinfer
