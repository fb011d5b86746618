// A compiled output constraint (Constraint: a grammar against one vocabulary, immutable and
// shared by every request that uses it) and its per-sequence state (ConstraintMatcher).
//
// Token masks. A token is allowed next iff its bytes, fed to the grammar after the text so far,
// leave some path alive (or complete the document exactly). The matcher's state is a set of
// configurations (matcher.h); the mask is the union over them. For a configuration whose top is
// automaton state s, the vocabulary trie is walked once per grammar (xgrammar's idea): the walk
// starts from s above an unknown caller and sorts every token into
//   - accepted: it is matched without leaving s's rule, or it ends exactly where the rule ends
//     (every live caller state can take the empty rest, the grammar being trimmed);
//   - dependent: it leaves the rule and then has more bytes, which only the real caller can
//     judge; these few are re-checked against the real stack each time;
//   - refused: neither.
// The entry is cached per state (on first use, or all at once with PrecomputeMasks). A number
// element on top has state that a cache key cannot hold (the digits so far), so it is walked
// directly; that walk is short because only digit-like tokens go deep.
//
// Thread safety: Constraint is safe to share (the cache fills under a mutex); a
// ConstraintMatcher belongs to one sequence and one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"
#include "structured/token_vocabulary.h"

namespace deepinfer {

struct ConstraintOptions {
  // Text up to and including the first occurrence of this string is free, and the grammar
  // applies to the text after it (reasoning before "</think>"). Empty: from the first byte.
  std::string free_until;
  // What the constraint is ("json_schema \"weather\""), for messages.
  std::string description;
};

class Constraint {
 public:
  Constraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
             ConstraintOptions options = {});
  Constraint(const Constraint&) = delete;
  Constraint& operator=(const Constraint&) = delete;

  const Grammar& grammar() const { return *grammar_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  const ConstraintOptions& options() const { return options_; }

  // Fills the mask cache for every automaton state (a benchmark's warm start; requests fill it
  // on first use otherwise).
  void PrecomputeMasks() const;
  struct CacheStats {
    size_t states = 0;           // automaton states of the grammar
    size_t cached = 0;           // with a mask entry
    size_t dependent_total = 0;  // dependent tokens summed over the entries
    size_t bytes = 0;            // memory of the entries
  };
  CacheStats cache_stats() const;

 private:
  friend class ConstraintMatcher;
  struct MaskEntry {
    std::vector<uint64_t> accepted_bits;  // when many tokens are accepted
    std::vector<int32_t> accepted_ids;    // otherwise
    std::vector<int32_t> dependent;
  };
  const MaskEntry& Entry(int32_t state) const;
  // Free phase: the tokens that complete `free_until` from matched prefix length k and whose
  // remaining bytes the grammar refuses at its start.
  const std::vector<int32_t>& RefusedTriggerTokens(size_t k) const;
  size_t TriggerStep(size_t k, uint8_t byte) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  ConstraintOptions options_;
  std::vector<size_t> trigger_failure_;  // KMP failure function of free_until
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<MaskEntry>> entries_;
  mutable std::vector<std::optional<std::vector<int32_t>>> refused_trigger_tokens_;
};

class ConstraintMatcher {
 public:
  // `end_tokens`: the ids that end the sequence (EOS and stop_token_ids); they are allowed
  // exactly when the document is complete.
  ConstraintMatcher(std::shared_ptr<const Constraint> constraint, std::vector<int32_t> end_tokens);

  // Bit t % 64 of mask[t / 64] is set iff token t may come next; ids at or beyond the
  // vocabulary stay clear. Returns whether any token is allowed.
  bool FillNextTokenMask(std::span<uint64_t> mask);
  // One token's verdict without a whole mask (a drafted token at verify time).
  bool IsAllowed(int32_t token);
  // Advances by `token`; false (nothing changes) when it is not allowed.
  bool Accept(int32_t token);
  // Undoes the last `tokens` accepted tokens (at most num_accepted()).
  void Rollback(size_t tokens);

  size_t num_accepted() const { return history_.size() - 1; }
  bool in_document() const { return current().free_matched < 0; }
  bool can_end() const { return in_document() && current().state.can_end; }
  bool finished() const { return current().finished; }
  // What may come next, for error messages: "one of '\"' '}'" or "the end of the output".
  std::string Expected() const;
  const Constraint& constraint() const { return *constraint_; }

 private:
  struct Snapshot {
    long free_matched = 0;  // bytes of free_until matched so far; -1 once in the document
    MatchState state;       // the grammar's state (in the document)
    bool finished = false;
  };
  const Snapshot& current() const { return history_.back(); }
  bool IsEndToken(int32_t token) const;
  // Whether `bytes` can follow `state` (leaves it alive or complete).
  bool Accepts(const MatchState& state, std::string_view bytes);
  // Where `token` leads from the current snapshot; nullopt when refused.
  std::optional<Snapshot> Advance(int32_t token);
  void FillDocumentMask(const MatchState& state, std::span<uint64_t> mask);

  std::shared_ptr<const Constraint> constraint_;
  std::vector<int32_t> end_tokens_;
  StackArena arena_;
  StackMachine machine_;
  std::vector<Snapshot> history_;  // history_[0]: before any token
};

}  // namespace deepinfer
