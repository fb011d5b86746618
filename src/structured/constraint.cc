#include "structured/constraint.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace deepinfer {
namespace {

void SetBit(std::span<uint64_t> mask, int32_t id) { mask[id >> 6] |= uint64_t{1} << (id & 63); }
bool GetBit(std::span<const uint64_t> mask, int32_t id) { return (mask[id >> 6] >> (id & 63)) & 1; }

// Walks the vocabulary trie from `start` (whose configurations can take a byte). Tokens that
// leave a path alive, complete the document, or end exactly where a path pops into an unknown
// caller go to `accepted`; with an unknown caller, tokens whose bytes continue after such a pop
// go to `dependent` (their verdict needs the caller).
template <typename Accepted, typename Dependent>
void WalkTrie(const TokenVocabulary& vocabulary, StackMachine& machine, const MatchState& start, Accepted&& accepted,
              Dependent&& dependent) {
  if (start.configs.empty()) return;
  const std::vector<TokenVocabulary::Node>& nodes = vocabulary.nodes();
  const size_t depth = vocabulary.max_token_bytes() + 1;
  std::vector<MatchState> levels(depth);
  std::vector<uint8_t> unknown(depth, 0);  // some path popped into the unknown caller on the way
  levels[0] = start;
  const auto each_token = [&](const TokenVocabulary::Node& n, auto&& f) {
    for (int32_t k = n.tokens_begin; k < n.tokens_end; ++k) f(vocabulary.node_token(k));
  };
  int32_t i = 1;
  const int32_t count = static_cast<int32_t>(nodes.size());
  while (i < count) {
    const TokenVocabulary::Node& n = nodes[i];
    MatchState& state = levels[n.depth];
    machine.Step(levels[n.depth - 1], n.byte, state);
    unknown[n.depth] = unknown[n.depth - 1] || state.reached_unknown;
    const bool live = !state.configs.empty();
    if (live || state.can_end || state.reached_unknown) {
      each_token(n, accepted);
    } else if (unknown[n.depth]) {
      each_token(n, dependent);
    }
    if (!live) {
      if (unknown[n.depth]) {
        for (int32_t j = i + 1; j < n.end; ++j) each_token(nodes[j], dependent);
      }
      i = n.end;
      continue;
    }
    ++i;
  }
}

}  // namespace

Constraint::Constraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
                       ConstraintOptions options)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), options_(std::move(options)) {
  DI_CHECK(grammar_ && vocabulary_);
  entries_.resize(grammar_->num_states());
  const std::string& t = options_.free_until;
  trigger_failure_.assign(t.size() + 1, 0);
  for (size_t i = 1, k = 0; i < t.size(); ++i) {
    while (k > 0 && t[i] != t[k]) k = trigger_failure_[k];
    if (t[i] == t[k]) ++k;
    trigger_failure_[i + 1] = k;
  }
  refused_trigger_tokens_.resize(t.size());
}

size_t Constraint::TriggerStep(size_t k, uint8_t byte) const {
  const std::string& t = options_.free_until;
  while (k > 0 && static_cast<uint8_t>(t[k]) != byte) k = trigger_failure_[k];
  return static_cast<uint8_t>(t[k]) == byte ? k + 1 : 0;
}

const Constraint::MaskEntry& Constraint::Entry(int32_t state) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<MaskEntry>& entry = entries_[state];
  if (entry) return *entry;
  entry = std::make_unique<MaskEntry>();
  StackArena arena;
  StackMachine machine(*grammar_, arena);
  MatchState start;
  start.configs.push_back({state, StackArena::kUnknown});
  std::vector<int32_t> accepted;
  WalkTrie(
      *vocabulary_, machine, start, [&](int32_t t) { accepted.push_back(t); },
      [&](int32_t t) { entry->dependent.push_back(t); });
  if (accepted.size() * 32 > vocabulary_->size()) {
    entry->accepted_bits.assign(vocabulary_->words(), 0);
    for (int32_t t : accepted) SetBit(entry->accepted_bits, t);
  } else {
    std::sort(accepted.begin(), accepted.end());
    entry->accepted_ids = std::move(accepted);
  }
  return *entry;
}

const std::vector<int32_t>& Constraint::RefusedTriggerTokens(size_t k) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (refused_trigger_tokens_[k]) return *refused_trigger_tokens_[k];
  }
  std::vector<int32_t> refused;
  StackArena arena;
  StackMachine machine(*grammar_, arena);
  MatchState initial;
  machine.Initial(initial);
  const std::string& t = options_.free_until;
  for (size_t id = 0; id < vocabulary_->size(); ++id) {
    if (!vocabulary_->is_text(static_cast<int32_t>(id))) continue;
    const std::string_view bytes = vocabulary_->bytes(static_cast<int32_t>(id));
    size_t matched = k;
    for (size_t i = 0; i < bytes.size(); ++i) {
      matched = TriggerStep(matched, static_cast<uint8_t>(bytes[i]));
      if (matched == t.size()) {
        MatchState state = initial;
        const bool ok = machine.Feed(state, bytes.substr(i + 1)) && (!state.configs.empty() || state.can_end);
        if (!ok) refused.push_back(static_cast<int32_t>(id));
        break;
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  refused_trigger_tokens_[k] = std::move(refused);
  return *refused_trigger_tokens_[k];
}

void Constraint::PrecomputeMasks() const {
  for (size_t s = 0; s < grammar_->num_states(); ++s) {
    if (grammar_->has_bytes(static_cast<int32_t>(s))) Entry(static_cast<int32_t>(s));
  }
}

Constraint::CacheStats Constraint::cache_stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CacheStats stats;
  stats.states = entries_.size();
  for (const auto& e : entries_) {
    if (!e) continue;
    ++stats.cached;
    stats.dependent_total += e->dependent.size();
    stats.bytes += sizeof(MaskEntry) + e->accepted_bits.size() * 8 + (e->accepted_ids.size() + e->dependent.size()) * 4;
  }
  return stats;
}

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const Constraint> constraint, std::vector<int32_t> end_tokens)
    : constraint_(std::move(constraint)), end_tokens_(std::move(end_tokens)), machine_(constraint_->grammar(), arena_) {
  Snapshot start;
  if (constraint_->options().free_until.empty()) {
    start.free_matched = -1;
    machine_.Initial(start.state);
  }
  history_.push_back(std::move(start));
}

bool ConstraintMatcher::IsEndToken(int32_t token) const {
  return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
}

bool ConstraintMatcher::Accepts(const MatchState& state, std::string_view bytes) {
  MatchState probe = state;
  return machine_.Feed(probe, bytes) && (!probe.configs.empty() || probe.can_end);
}

void ConstraintMatcher::FillDocumentMask(const MatchState& state, std::span<uint64_t> mask) {
  const TokenVocabulary& vocabulary = constraint_->vocabulary();
  const size_t words = std::min(mask.size(), vocabulary.words());
  const StackArena::Mark mark = arena_.mark();
  const auto allow = [&](int32_t t) {
    if (static_cast<size_t>(t >> 6) < words) SetBit(mask, t);
  };
  for (const StackConfig& c : state.configs) {
    if (c.top < 0) {
      MatchState start;
      start.configs.push_back(c);
      WalkTrie(vocabulary, machine_, start, allow, [](int32_t) {});
      continue;
    }
    const Constraint::MaskEntry& entry = constraint_->Entry(c.top);
    if (!entry.accepted_bits.empty()) {
      for (size_t w = 0; w < words; ++w) mask[w] |= entry.accepted_bits[w];
    } else {
      for (int32_t t : entry.accepted_ids) allow(t);
    }
    MatchState single;
    for (int32_t t : entry.dependent) {
      if (static_cast<size_t>(t >> 6) >= words || GetBit(mask, t)) continue;
      single.configs.assign(1, c);
      single.can_end = false;
      if (Accepts(single, vocabulary.bytes(t))) SetBit(mask, t);
    }
  }
  arena_.Release(mark);
}

bool ConstraintMatcher::FillNextTokenMask(std::span<uint64_t> mask) {
  std::fill(mask.begin(), mask.end(), 0);
  const Snapshot& now = current();
  if (now.finished) return false;
  const TokenVocabulary& vocabulary = constraint_->vocabulary();
  const size_t words = std::min(mask.size(), vocabulary.words());
  if (now.free_matched >= 0) {
    std::copy(vocabulary.text_mask().begin(), vocabulary.text_mask().begin() + static_cast<std::ptrdiff_t>(words),
              mask.begin());
    for (int32_t t : constraint_->RefusedTriggerTokens(static_cast<size_t>(now.free_matched))) {
      if (static_cast<size_t>(t >> 6) < words) mask[t >> 6] &= ~(uint64_t{1} << (t & 63));
    }
  } else {
    FillDocumentMask(now.state, mask);
  }
  for (int32_t t : end_tokens_) {
    if (t < 0 || static_cast<size_t>(t >> 6) >= mask.size()) continue;
    if (can_end()) {
      SetBit(mask, t);
    } else {
      mask[t >> 6] &= ~(uint64_t{1} << (t & 63));
    }
  }
  for (size_t w = 0; w < mask.size(); ++w) {
    if (mask[w] != 0) return true;
  }
  return false;
}

std::optional<ConstraintMatcher::Snapshot> ConstraintMatcher::Advance(int32_t token) {
  const Snapshot& now = current();
  if (now.finished) return std::nullopt;
  if (IsEndToken(token)) {
    if (!can_end()) return std::nullopt;
    Snapshot next = now;
    next.finished = true;
    return next;
  }
  const TokenVocabulary& vocabulary = constraint_->vocabulary();
  if (token < 0 || static_cast<size_t>(token) >= vocabulary.size() || !vocabulary.is_text(token)) return std::nullopt;
  std::string_view bytes = vocabulary.bytes(token);
  Snapshot next;
  next.free_matched = now.free_matched;
  if (now.free_matched >= 0) {
    size_t matched = static_cast<size_t>(now.free_matched);
    size_t used = 0;
    const size_t trigger = constraint_->options().free_until.size();
    while (used < bytes.size() && matched < trigger) matched = constraint_->TriggerStep(matched, bytes[used++]);
    if (matched < trigger) {
      next.free_matched = static_cast<long>(matched);
      return next;
    }
    next.free_matched = -1;
    machine_.Initial(next.state);
    bytes.remove_prefix(used);
  } else {
    next.state = now.state;
  }
  if (!machine_.Feed(next.state, bytes) || (next.state.configs.empty() && !next.state.can_end)) return std::nullopt;
  return next;
}

bool ConstraintMatcher::IsAllowed(int32_t token) {
  const StackArena::Mark mark = arena_.mark();
  const bool allowed = Advance(token).has_value();
  arena_.Release(mark);
  return allowed;
}

bool ConstraintMatcher::Accept(int32_t token) {
  std::optional<Snapshot> next = Advance(token);
  if (!next) return false;
  history_.push_back(std::move(*next));
  return true;
}

void ConstraintMatcher::Rollback(size_t tokens) {
  DI_CHECK(tokens <= num_accepted(), "Rollback(", tokens, ") with only ", num_accepted(), " tokens accepted");
  history_.resize(history_.size() - tokens);
}

std::string ConstraintMatcher::Expected() const {
  const Snapshot& now = current();
  if (now.finished) return "nothing (the output is complete)";
  if (now.free_matched >= 0) return "free text until \"" + constraint_->options().free_until + "\"";
  ByteSet next;
  for (const StackConfig& c : now.state.configs) {
    if (c.top >= 0) {
      next = next | constraint_->grammar().bytes(c.top);
    } else {
      next = next | ByteSet::Chars("0123456789-+.eE");
    }
  }
  std::string out;
  for (int b = 0; b < 256; ++b) {
    if (!next.Has(static_cast<uint8_t>(b))) continue;
    if (!out.empty()) out += ' ';
    if (b >= 0x21 && b < 0x7f) {
      out += '\'';
      out += static_cast<char>(b);
      out += '\'';
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "0x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  if (!out.empty()) out = "one of " + out;
  if (now.state.can_end) out += out.empty() ? "the end of the output" : " or the end of the output";
  return out.empty() ? "nothing" : out;
}

}  // namespace deepinfer
