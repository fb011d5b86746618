// A byte-level grammar for constrained decoding, and the builder that compiles it.
//
// A grammar is a set of rules. A rule's body is an expression over bytes and calls of rules
// (sequences, alternatives, byte sets, bounded or unbounded repetition, graphs of expressions,
// and intersections / differences of call-free expressions); a rule may also be a JSON number
// inside a range (NumberRange, matched by its own element). Build() compiles every rule body
// into one deterministic automaton whose edges are byte classes and rule calls: the grammar is a
// recursive transition network, i.e. a pushdown automaton, and recursion (JSON Schema's $ref)
// is a call. GrammarMatcher (matcher.h) runs it with a set of stacks.
//
// Build() guarantees what exact token masks rely on: the automata are trimmed, so every state a
// matcher can reach still has a completion (an unsatisfiable rule or alternative is removed, and
// a grammar whose root admits nothing is an Error); no rule can call itself without consuming a
// byte (left recursion is an Error naming the rules); the size stays under kMaxStates.
//
// A Grammar is immutable and safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "structured/byte_set.h"
#include "structured/number_range.h"

namespace deepinfer {

using RuleId = int32_t;

class Grammar {
 public:
  enum class RuleKind : uint8_t { kAutomaton, kNumber };
  struct Call {
    RuleId rule;
    int32_t return_state;  // where the caller continues once the callee is complete
  };

  RuleId root() const { return root_; }
  size_t num_rules() const { return rules_.size(); }
  size_t num_states() const { return state_rule_.size(); }
  const std::string& rule_name(RuleId rule) const { return rules_[rule].name; }
  RuleKind kind(RuleId rule) const { return rules_[rule].kind; }
  const NumberRange& number_range(RuleId rule) const { return number_ranges_[rules_[rule].number_range]; }
  int32_t start_state(RuleId rule) const { return rules_[rule].start_state; }

  // States are global ids in [0, num_states()).
  RuleId rule_of(int32_t state) const { return state_rule_[state]; }
  int32_t Next(int32_t state, uint8_t byte) const {
    return next_[row_[state] + byte_class_[rules_[state_rule_[state]].classes][byte]];
  }
  bool is_final(int32_t state) const { return flags_[state] & kFinal; }
  bool has_bytes(int32_t state) const { return flags_[state] & kHasBytes; }
  // Final with nothing after it: a call returning here returns straight to the caller's caller.
  bool is_tail(int32_t state) const { return (flags_[state] & (kFinal | kHasBytes | kHasCalls)) == kFinal; }
  std::span<const Call> calls(int32_t state) const {
    return std::span<const Call>(calls_).subspan(call_begin_[state], call_begin_[state + 1] - call_begin_[state]);
  }
  // The bytes a state accepts (error messages).
  ByteSet bytes(int32_t state) const;

  // Whether the whole text is in the language (a convenience over GrammarMatcher).
  bool Accepts(std::string_view text) const;

 private:
  friend class GrammarBuilder;
  static constexpr uint8_t kFinal = 1, kHasBytes = 2, kHasCalls = 4;
  struct Rule {
    std::string name;
    RuleKind kind = RuleKind::kAutomaton;
    int32_t start_state = -1;
    int32_t classes = 0;  // index into byte_class_
    int32_t number_range = -1;
  };
  RuleId root_ = 0;
  std::vector<Rule> rules_;
  std::vector<NumberRange> number_ranges_;
  std::vector<std::array<uint8_t, 256>> byte_class_;
  std::vector<RuleId> state_rule_;
  std::vector<uint8_t> flags_;
  std::vector<uint32_t> row_;  // start of the state's row in next_ (one entry per byte class)
  std::vector<int32_t> next_;
  std::vector<uint32_t> call_begin_;  // num_states + 1 entries
  std::vector<Call> calls_;
};

class GrammarBuilder {
 public:
  // An expression handle, valid for the builder that made it.
  struct Expr {
    int32_t id = -1;
  };
  struct Edge {
    int from;
    int to;
    Expr label;
  };

  // The most automaton states a grammar may have (and NFA states while compiling).
  static constexpr size_t kMaxStates = 400000;
  // The most NFA states one rule's subset construction may visit (every target set it looks up,
  // counted by size): the bound on a grammar's compile time, 40-140 ns a step (up to ~0.35 s here, on the
  // request's thread). Overlapping wildcards explode a regex's automaton well before kMaxStates:
  // a fuzzed 207-character regex reached 380k states in 34M steps (1.5 s, 25 s under ASan).
  static constexpr size_t kMaxSubsetSteps = 2000000;

  Expr Empty();    // the empty string
  Expr Nothing();  // no string at all
  Expr Bytes(ByteSet set);
  Expr Literal(std::string_view bytes);
  Expr Seq(std::vector<Expr> parts);
  Expr Alt(std::vector<Expr> options);
  // min..max copies (max unset: unbounded).
  Expr Repeat(Expr e, int64_t min, std::optional<int64_t> max);
  Expr Optional(Expr e) { return Repeat(e, 0, 1); }
  Expr Star(Expr e) { return Repeat(e, 0, std::nullopt); }
  Expr Call(RuleId rule);
  // Paths from `start` to any node of `finals` in a graph of nodes 0..nodes-1 whose edges match
  // expressions: shares suffixes that a tree of Seq/Alt would copy (optional object members).
  Expr Graph(int nodes, int start, std::vector<int> finals, std::vector<Edge> edges);
  // Strings both match / the first matches and the second does not. Both must be call-free.
  Expr Intersect(Expr a, Expr b);
  Expr Subtract(Expr a, Expr b);
  bool IsCallFree(Expr e) const;
  // A rough size (automaton states it will take), to decide what to make a rule.
  size_t Size(Expr e) const { return nodes_[e.id].size; }

  RuleId DeclareRule(std::string name);
  void DefineRule(RuleId rule, Expr body);
  RuleId NumberRule(std::string name, NumberRange range);
  // A rule for `body` (a fresh name made from `name`).
  RuleId MakeRule(std::string name, Expr body);

  // Compiles every rule reachable from `root`. Throws Error (too large, left recursion, a root
  // that admits nothing, a declared rule never defined).
  std::shared_ptr<const Grammar> Build(RuleId root) const;

 private:
  enum class Kind : uint8_t { kEmpty, kNothing, kBytes, kSeq, kAlt, kRepeat, kCall, kGraph, kDfa };
  struct Node {
    Kind kind;
    ByteSet bytes = {};
    std::vector<int32_t> children = {};
    int64_t min = 0;
    std::optional<int64_t> max = std::nullopt;
    RuleId rule = -1;
    int32_t data = -1;  // graph_ or dfas_ index
    size_t size = 1;
    bool call_free = true;
  };
  struct GraphData {
    int nodes;
    int start;
    std::vector<int> finals;
    std::vector<Edge> edges;
  };
  // A call-free automaton made by Intersect / Subtract.
  struct DfaData {
    int32_t start;
    std::vector<uint8_t> final;
    std::vector<std::vector<std::pair<ByteSet, int32_t>>> edges;
  };
  struct RuleDef {
    std::string name;
    Grammar::RuleKind kind;
    std::optional<Expr> body;
    int32_t number_range = -1;
  };
  friend struct NfaBuilder;

  Expr Add(Node node);
  DfaData ToDfa(Expr e) const;
  Expr Product(Expr a, Expr b, bool subtract);

  std::vector<Node> nodes_;
  std::vector<GraphData> graphs_;
  std::vector<DfaData> dfas_;
  std::vector<RuleDef> rules_;
  std::vector<NumberRange> number_ranges_;
};

}  // namespace deepinfer
