// A backend that counts every op call and hands it to the CPU backend: what a model test uses to
// see that a forward reaches the device only through the Backend interface.
#pragma once

#include <map>
#include <string>

#include "backend/cpu_backend.h"

namespace deepinfer::testing {

class RecordingBackend final : public Backend {
 public:
  RecordingBackend(ThreadPool& pool, IsaLevel isa) : cpu_(pool, isa) {}

  // Calls per op name since construction (or the last Clear).
  const std::map<std::string, int>& calls() const { return calls_; }
  int count(const std::string& op) const {
    const auto it = calls_.find(op);
    return it == calls_.end() ? 0 : it->second;
  }
  void Clear() { calls_.clear(); }

  std::string_view name() const override { return "recording"; }
  Workspace& workspace() override { return cpu_.workspace(); }
  uint64_t held_bytes() const override { return cpu_.held_bytes(); }

  void Linear(const WeightMatrix& w, const Tensor& x, const Tensor& y, LinearNumerics numerics) override {
    Record(numerics == LinearNumerics::kCheckpoint ? "Linear" : "Linear.dense");
    cpu_.Linear(w, x, y, numerics);
  }
  void GroupedLinear(const WeightMatrix& w, int groups, const Tensor& x, const Tensor& y) override {
    Record("GroupedLinear");
    cpu_.GroupedLinear(w, groups, x, y);
  }
  void Copy(const Tensor& from, const Tensor& to) override {
    Record("Copy");
    cpu_.Copy(from, to);
  }
  void Embed(const WeightMatrix& table, std::span<const int32_t> tokens, int copies, const Tensor& streams) override {
    Record("Embed");
    cpu_.Embed(table, tokens, copies, streams);
  }
  void RmsNorm(const Tensor& x, std::span<const float> weight, float eps, const Tensor& out) override {
    Record("RmsNorm");
    cpu_.RmsNorm(x, weight, eps, out);
  }
  void Rope(const Tensor& x, int heads, const RopeTable& table, std::span<const int64_t> positions,
            bool inverse) override {
    Record(inverse ? "Rope.inverse" : "Rope");
    cpu_.Rope(x, heads, table, positions, inverse);
  }
  void HcMixes(const Tensor& streams, const WeightMatrix& fn, std::span<const float> base, std::span<const float> scale,
               const HcParams& params, const Tensor& pre, const Tensor& post, const Tensor& comb) override {
    Record("HcMixes");
    cpu_.HcMixes(streams, fn, base, scale, params, pre, post, comb);
  }
  void HcCollapse(const Tensor& streams, const Tensor& pre, const Tensor& out) override {
    Record("HcCollapse");
    cpu_.HcCollapse(streams, pre, out);
  }
  void HcExpand(const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& streams) override {
    Record("HcExpand");
    cpu_.HcExpand(y, post, comb, streams);
  }
  void EncodeWindowRows(const Tensor& x, const Tensor& codes, const Tensor& exponents, const Tensor& decoded) override {
    Record("EncodeWindowRows");
    cpu_.EncodeWindowRows(x, codes, exponents, decoded);
  }
  void StoreWindowEntries(const Tensor& codes, const Tensor& exponents,
                          std::span<const WindowEntry<uint8_t>> entries) override {
    Record("StoreWindowEntries");
    cpu_.StoreWindowEntries(codes, exponents, entries);
  }
  void DecodeWindowEntries(std::span<const WindowEntry<const uint8_t>> entries, const Tensor& out) override {
    Record("DecodeWindowEntries");
    cpu_.DecodeWindowEntries(entries, out);
  }
  void EncodeCompressedEntries(const Tensor& latents, const Tensor& keys,
                               std::span<const CompressedEntry<uint8_t>> entries) override {
    Record("EncodeCompressedEntries");
    cpu_.EncodeCompressedEntries(latents, keys, entries);
  }
  void DecodeCompressedEntries(std::span<const CompressedEntry<const uint8_t>> entries, const Tensor& out) override {
    Record("DecodeCompressedEntries");
    cpu_.DecodeCompressedEntries(entries, out);
  }
  void DecodeIndexKeys(std::span<const CompressedEntry<const uint8_t>> entries, const Tensor& out) override {
    Record("DecodeIndexKeys");
    cpu_.DecodeIndexKeys(entries, out);
  }
  void CompressorPool(const Tensor& kv, const Tensor& gate, int ratio, const Tensor& pooled) override {
    Record("CompressorPool");
    cpu_.CompressorPool(kv, gate, ratio, pooled);
  }
  void IndexerSelect(const Tensor& q, const Tensor& head_weights, const RopeTable& rope, const IndexerParams& params,
                     std::span<const IndexerRow> rows) override {
    Record("IndexerSelect");
    cpu_.IndexerSelect(q, head_weights, rope, params, rows);
  }
  void SparseAttention(const Tensor& q, int heads, std::span<const float* const> entries,
                       std::span<const int64_t> row_begin, std::span<const float> sink, float softmax_scale,
                       const Tensor& out) override {
    Record("SparseAttention");
    cpu_.SparseAttention(q, heads, entries, row_begin, sink, softmax_scale, out);
  }
  void Route(const Tensor& scores, std::span<const float> bias, const RouterParams& params, const Tensor& experts,
             const Tensor& weights) override {
    Record("Route");
    cpu_.Route(scores, bias, params, experts, weights);
  }
  void SwiGlu(const Tensor& gate, const Tensor& up, std::span<const float> route_weights, float limit,
              const Tensor& out) override {
    Record("SwiGlu");
    cpu_.SwiGlu(gate, up, route_weights, limit, out);
  }
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, const Tensor& out) override {
    Record("GatherRows");
    cpu_.GatherRows(x, rows, out);
  }
  void ScatterAddRows(const Tensor& src, std::span<const int64_t> rows, const Tensor& acc) override {
    Record("ScatterAddRows");
    cpu_.ScatterAddRows(src, rows, acc);
  }
  void AddRounded(const Tensor& a, const Tensor& b, const Tensor& out) override {
    Record("AddRounded");
    cpu_.AddRounded(a, b, out);
  }
  void EngramGather(const uint8_t* codes, const uint8_t* scales, int64_t table_rows, int64_t dim,
                    std::span<const int64_t> ids, const Tensor& out) override {
    Record("EngramGather");
    cpu_.EngramGather(codes, scales, table_rows, dim, ids, out);
  }
  void EngramGate(const Tensor& kv, std::span<const float> gate_weight, float eps, const Tensor& streams) override {
    Record("EngramGate");
    cpu_.EngramGate(kv, gate_weight, eps, streams);
  }

 private:
  void Record(const char* op) { ++calls_[op]; }

  CpuBackend cpu_;
  std::map<std::string, int> calls_;
};

}  // namespace deepinfer::testing
