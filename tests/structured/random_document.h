// Random documents of a grammar for property tests: a walk over the allowed bytes.
#pragma once

#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace deepinfer {

// A random document of the grammar: a walk over allowed bytes, weighted towards the bytes that
// close strings and structures so documents stay short.
inline std::optional<std::string> RandomDocument(const Grammar& grammar, std::mt19937& rng, size_t max_bytes) {
  StackArena arena;
  StackMachine machine(grammar, arena);
  MatchState state, next;
  machine.Initial(state);
  std::string out;
  while (out.size() < max_bytes) {
    if (state.can_end && (state.configs.empty() || rng() % 3 == 0)) return out;
    std::vector<std::pair<uint8_t, int>> options;
    int total = 0;
    for (int b = 0; b < 256; ++b) {
      machine.Step(state, static_cast<uint8_t>(b), next);
      if (next.dead()) continue;
      const std::string_view closing = "\"}],:<";
      const int weight = closing.find(static_cast<char>(b)) != std::string_view::npos ? 40
                         : (b >= '0' && b <= '9')                                     ? 6
                         : b == '\\'                                                  ? 2
                                                                                      : 1;
      options.emplace_back(static_cast<uint8_t>(b), weight);
      total += weight;
    }
    if (options.empty()) return std::nullopt;
    int pick = static_cast<int>(rng() % static_cast<unsigned>(total));
    uint8_t chosen = options.back().first;
    for (const auto& [b, w] : options) {
      if ((pick -= w) < 0) {
        chosen = b;
        break;
      }
    }
    machine.Step(state, chosen, next);
    std::swap(state, next);
    out += static_cast<char>(chosen);
  }
  return std::nullopt;
}

}  // namespace deepinfer
