// A forward on a fresh CPU backend at the detected ISA level: what most model tests run.
#pragma once

#include <span>
#include <vector>

#include "backend/cpu_backend.h"
#include "model/model.h"

namespace deepinfer {

inline std::vector<float> CpuForward(const Model& model, std::span<const ForwardItem> items, ThreadPool& pool) {
  CpuBackend backend(pool, DetectIsa());
  return model.Forward(items, ComputeContext{backend});
}

}  // namespace deepinfer
