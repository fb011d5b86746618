#include "structured/matcher.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer {

StackArena::StackArena() {
  nodes_.push_back({-1, -1});  // kRoot
  nodes_.push_back({-1, -1});  // kUnknown
}

int32_t StackArena::Push(int32_t state, int32_t parent) {
  DI_CHECK(state >= 0 && parent >= 0);
  auto [it, inserted] = node_ids_.emplace(Key(state, parent), static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({state, parent});
  return it->second;
}

int32_t StackArena::Number(RuleId rule, std::string text, NumberPrefixStatus status) {
  std::string key(reinterpret_cast<const char*>(&rule), sizeof(rule));
  key += text;
  auto [it, inserted] = number_ids_.emplace(std::move(key), static_cast<int32_t>(numbers_.size()));
  if (inserted) numbers_.push_back({rule, std::move(text), status});
  return it->second;
}

void StackArena::Release(const Mark& mark) {
  DI_CHECK(mark.nodes >= 2 && mark.nodes <= nodes_.size() && mark.numbers <= numbers_.size());
  for (size_t i = mark.nodes; i < nodes_.size(); ++i) node_ids_.erase(Key(nodes_[i].top, nodes_[i].parent));
  nodes_.resize(mark.nodes);
  for (size_t i = mark.numbers; i < numbers_.size(); ++i) {
    std::string key(reinterpret_cast<const char*>(&numbers_[i].rule), sizeof(RuleId));
    key += numbers_[i].text;
    number_ids_.erase(key);
  }
  numbers_.resize(mark.numbers);
}

// Expands work_ into `out` (which keeps what it already holds). Every configuration is expanded
// once per call: a nullable loop (a state calling a rule that can be empty and returning to
// itself) comes back to a visited configuration and stops.
void StackMachine::Expand(MatchState& out) {
  const Grammar& g = *grammar_;
  const auto pop = [&](int32_t parent) {
    if (parent == StackArena::kRoot) {
      out.can_end = true;
    } else if (parent == StackArena::kUnknown) {
      out.reached_unknown = true;
    } else {
      work_.push_back(arena_->node(parent));
    }
  };
  while (!work_.empty()) {
    const StackConfig c = work_.back();
    work_.pop_back();
    if (std::find(visited_.begin(), visited_.end(), c) != visited_.end()) continue;
    visited_.push_back(c);
    if (c.top < 0) {
      const StackArena::NumberFrame& frame = arena_->number(~c.top);
      out.configs.push_back(c);
      if (frame.status.complete) pop(c.parent);
      continue;
    }
    if (g.has_bytes(c.top)) out.configs.push_back(c);
    for (const Grammar::Call& call : g.calls(c.top)) {
      const int32_t below = g.is_tail(call.return_state) ? c.parent : arena_->Push(call.return_state, c.parent);
      if (g.kind(call.rule) == Grammar::RuleKind::kNumber) {
        const NumberRange& range = g.number_range(call.rule);
        work_.push_back({~arena_->Number(call.rule, "", AnalyzeNumberPrefix(range, "")), below});
      } else {
        work_.push_back({g.start_state(call.rule), below});
      }
    }
    if (g.is_final(c.top)) pop(c.parent);
  }
}

void StackMachine::Initial(MatchState& out) {
  out = MatchState{};
  const Grammar& g = *grammar_;
  visited_.clear();
  if (g.kind(g.root()) == Grammar::RuleKind::kNumber) {
    const NumberRange& range = g.number_range(g.root());
    work_.push_back({~arena_->Number(g.root(), "", AnalyzeNumberPrefix(range, "")), StackArena::kRoot});
  } else {
    work_.push_back({g.start_state(g.root()), StackArena::kRoot});
  }
  Expand(out);
}

void StackMachine::From(StackConfig config, MatchState& out) {
  out = MatchState{};
  visited_.clear();
  work_.push_back(config);
  Expand(out);
}

void StackMachine::Step(const MatchState& in, uint8_t byte, MatchState& out) {
  DI_CHECK(&in != &out);
  out.configs.clear();
  out.can_end = false;
  out.reached_unknown = false;
  visited_.clear();
  const Grammar& g = *grammar_;
  for (const StackConfig& c : in.configs) {
    if (c.top < 0) {
      const StackArena::NumberFrame& frame = arena_->number(~c.top);
      std::string text = frame.text;
      text.push_back(static_cast<char>(byte));
      const RuleId rule = frame.rule;
      const NumberPrefixStatus status = AnalyzeNumberPrefix(g.number_range(rule), text);
      if (status.viable) work_.push_back({~arena_->Number(rule, std::move(text), status), c.parent});
    } else {
      const int32_t next = g.Next(c.top, byte);
      if (next >= 0) work_.push_back({next, c.parent});
    }
    Expand(out);
  }
}

bool StackMachine::Feed(MatchState& state, std::string_view bytes) {
  for (char b : bytes) {
    if (state.configs.empty()) return false;
    Step(state, static_cast<uint8_t>(b), scratch_);
    std::swap(state, scratch_);
    if (state.configs.empty() && !state.can_end && !state.reached_unknown) return false;
  }
  return true;
}

bool Grammar::Accepts(std::string_view text) const {
  StackArena arena;
  StackMachine machine(*this, arena);
  MatchState state;
  machine.Initial(state);
  return machine.Feed(state, text) && state.can_end;
}

}  // namespace deepinfer
