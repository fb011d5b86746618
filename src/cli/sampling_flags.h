// The sampling flags `generate` and `chat` share, declared once. Options must have a
// `SamplingParams sampling` member; each command keeps its own defaults there. Ranges are
// the sampler's (engine/sampler.h), checked here so the error names the flag.
#pragma once

#include <string>
#include <vector>

#include "cli/flags.h"
#include "engine/sampler.h"

namespace deepinfer {

inline float RealFlagIn(const std::string& flag, const std::string& v, double lo, double hi, bool lo_open = false) {
  const double x = ParseRealFlag(flag, v);
  if (x < lo || x > hi || (lo_open && x == lo)) {
    throw MakeError(flag, ": expected a number in ", lo_open ? "(" : "[", lo, ", ", hi, "], got '", v, "'");
  }
  return static_cast<float>(x);
}

template <typename Options>
std::vector<Flag<Options>> SamplingFlags() {
  return {
      {"--temperature", "T", "0 = greedy; > 0 samples",
       [](Options& o, const std::string& v) { o.sampling.temperature = RealFlagIn("--temperature", v, 0, 100); }},
      {"--top-p", "P", "keep the most likely tokens up to probability mass P, (0, 1]; 1 = off",
       [](Options& o, const std::string& v) { o.sampling.top_p = RealFlagIn("--top-p", v, 0, 1, true); }},
      {"--top-k", "K", "keep the K most likely tokens; 0 = off",
       [](Options& o, const std::string& v) {
         o.sampling.top_k = static_cast<int32_t>(ParseIntFlag("--top-k", v, 0, INT32_MAX));
       }},
      {"--min-p", "P", "drop tokens less likely than P x the most likely one, [0, 1]; 0 = off",
       [](Options& o, const std::string& v) { o.sampling.min_p = RealFlagIn("--min-p", v, 0, 1); }},
      {"--repetition-penalty", "R", "penalise tokens of the prompt and output, > 0; 1 = off",
       [](Options& o, const std::string& v) {
         o.sampling.repetition_penalty = RealFlagIn("--repetition-penalty", v, 0, 100, true);
       }},
      {"--presence-penalty", "X", "subtract X from tokens already generated, [-2, 2]",
       [](Options& o, const std::string& v) {
         o.sampling.presence_penalty = RealFlagIn("--presence-penalty", v, -2, 2);
       }},
      {"--frequency-penalty", "X", "subtract X per earlier occurrence in the output, [-2, 2]",
       [](Options& o, const std::string& v) {
         o.sampling.frequency_penalty = RealFlagIn("--frequency-penalty", v, -2, 2);
       }},
  };
}

// `base` followed by the sampling flags.
template <typename Options>
std::vector<Flag<Options>> WithSamplingFlags(std::vector<Flag<Options>> base) {
  for (Flag<Options>& f : SamplingFlags<Options>()) base.push_back(std::move(f));
  return base;
}

}  // namespace deepinfer
