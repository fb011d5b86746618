// Runs a Grammar over bytes with a set of stacks (a pushdown automaton simulated on all paths at
// once, as llama.cpp's GBNF matcher does, with stacks shared as trees).
//
// A configuration is the top frame of one stack: an automaton state (or a number element with
// the text it has read) plus the node below it. Nodes are hash-consed in a StackArena, so equal
// stacks are equal ids and configurations compare as two integers. A MatchState is the set of
// configurations that can take a byte now, plus whether the text so far is a complete document
// (`can_end`). Closure: a state with call edges pushes the callee (its return frame below it,
// omitted when the return state is a tail), a final state pops. Calling with a caller of
// kUnknown (mask-cache computations, constraint.h) records a pop into the unknown caller
// instead of continuing.
//
// Not thread-safe: one StackMachine and its arena per matcher.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"
#include "structured/number_range.h"

namespace deepinfer {

struct StackConfig {
  int32_t top;     // >= 0: an automaton state; < 0: ~(number frame id) in the arena
  int32_t parent;  // arena node below the top
  bool operator==(const StackConfig&) const = default;
};

class StackArena {
 public:
  static constexpr int32_t kRoot = 0;     // below the root rule: popping here ends the document
  static constexpr int32_t kUnknown = 1;  // an unknown caller

  struct NumberFrame {
    RuleId rule;
    std::string text;  // the number's bytes so far
    NumberPrefixStatus status;
  };
  // Everything created after a mark can be dropped again (masks probe many tokens).
  struct Mark {
    size_t nodes;
    size_t numbers;
  };

  StackArena();

  // The node for a return frame `state` above `parent` (the same id for the same stack).
  int32_t Push(int32_t state, int32_t parent);
  const StackConfig& node(int32_t id) const { return nodes_[id]; }
  // A number frame's id (interned by rule and text).
  int32_t Number(RuleId rule, std::string text, NumberPrefixStatus status);
  const NumberFrame& number(int32_t id) const { return numbers_[id]; }
  size_t num_nodes() const { return nodes_.size(); }

  Mark mark() const { return {nodes_.size(), numbers_.size()}; }
  void Release(const Mark& mark);

 private:
  static uint64_t Key(int32_t state, int32_t parent) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
  }
  std::vector<StackConfig> nodes_;  // (state, parent) of each return frame
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<NumberFrame> numbers_;
  std::unordered_map<std::string, int32_t> number_ids_;  // key: rule id bytes + text
};

struct MatchState {
  std::vector<StackConfig> configs;  // the configurations that can take a byte
  bool can_end = false;              // the text so far is a complete document
  bool reached_unknown = false;      // (kUnknown callers) some path popped into the caller
  bool dead() const { return configs.empty() && !can_end && !reached_unknown; }
};

class StackMachine {
 public:
  StackMachine(const Grammar& grammar, StackArena& arena) : grammar_(&grammar), arena_(&arena) {}

  // The closure of the root rule's start (caller kRoot).
  void Initial(MatchState& out);
  // The closure of one configuration whose caller may be kUnknown.
  void From(StackConfig config, MatchState& out);
  // `out` = the configurations after `byte` (in and out must differ).
  void Step(const MatchState& in, uint8_t byte, MatchState& out);
  // Steps through `bytes`; false (state then unspecified) when some byte is refused.
  bool Feed(MatchState& state, std::string_view bytes);

  const Grammar& grammar() const { return *grammar_; }
  StackArena& arena() { return *arena_; }

 private:
  void Expand(MatchState& out);

  const Grammar* grammar_;
  StackArena* arena_;
  std::vector<StackConfig> work_;
  std::vector<StackConfig> visited_;
  MatchState scratch_;
};

}  // namespace deepinfer
