#include "backend/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace deepinfer {

RopeTable::RopeTable(int64_t rope_dim, double base, int64_t original_seq_len, double factor, double beta_fast,
                     double beta_slow) {
  const int64_t pairs = rope_dim / 2;
  freqs_.resize(pairs);
  const float base_f = static_cast<float>(base);
  for (int64_t i = 0; i < pairs; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    freqs_[i] = 1.0f / std::pow(base_f, exponent);
  }
  if (original_seq_len > 0) {
    // The dimension whose wavelength completes `rotations` turns over the training context.
    auto corrected_dim = [&](double rotations) {
      return static_cast<double>(rope_dim) *
             std::log(static_cast<double>(original_seq_len) / (rotations * 2 * std::numbers::pi)) /
             (2 * std::log(base));
    };
    const double low = std::max(std::floor(corrected_dim(beta_fast)), 0.0);
    const double high = std::min(std::ceil(corrected_dim(beta_slow)), static_cast<double>(rope_dim - 1));
    const float span = static_cast<float>(std::max(high - low, 1e-3));
    const float factor_f = static_cast<float>(factor);
    for (int64_t i = 0; i < pairs; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / span, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      freqs_[i] = freqs_[i] / factor_f * (1.0f - smooth) + freqs_[i] * smooth;
    }
  }
}

void RopeTable::CosSin(int64_t position, float* cos, float* sin) const {
  const float pos = static_cast<float>(position);
  for (size_t i = 0; i < freqs_.size(); ++i) {
    const float angle = pos * freqs_[i];
    cos[i] = std::cos(angle);
    sin[i] = std::sin(angle);
  }
}

}  // namespace deepinfer
