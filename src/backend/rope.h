// Rotary tables of V4.1, computed as the reference's precompute_freqs_cis does, in fp32:
// base frequencies, then (compressed layers) YaRN's ramp between beta_fast and beta_slow.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

class RopeTable {
 public:
  // original_seq_len == 0 disables YaRN.
  RopeTable(int64_t rope_dim, double base, int64_t original_seq_len, double factor, double beta_fast, double beta_slow);

  int64_t pairs() const { return static_cast<int64_t>(freqs_.size()); }
  // cos/sin of position * freq for every pair (`pairs()` floats each).
  void CosSin(int64_t position, float* cos, float* sin) const;

 private:
  std::vector<float> freqs_;
};

}  // namespace deepinfer
