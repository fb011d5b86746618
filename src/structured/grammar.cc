// Compilation: each rule body becomes a Thompson NFA (epsilon, byte-set and call edges), then a
// DFA by subset construction over the rule's byte classes and its call labels (a call is a
// letter: a DFA state has at most one target per callee). Then the whole network is trimmed
// (states that cannot reach a final state through bytes and productive calls are cut), and
// checked for left recursion.
#include "structured/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "core/error.h"

namespace deepinfer {
namespace {

struct VectorHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001b3ULL;
    return h;
  }
};

struct ByteSetHash {
  size_t operator()(const std::array<uint64_t, 4>& w) const {
    return w[0] * 0x9e3779b97f4a7c15ULL ^ w[1] * 0xbf58476d1ce4e5b9ULL ^ w[2] * 0x94d049bb133111ebULL ^ w[3];
  }
};

struct NfaState {
  std::vector<int32_t> eps;
  std::vector<std::pair<int32_t, int32_t>> bytes;  // (byte-set index, target)
  std::vector<std::pair<RuleId, int32_t>> calls;
};

[[noreturn]] void TooLarge() {
  throw MakeError("the grammar is too large (more than ", GrammarBuilder::kMaxStates,
                  " automaton states); a repetition count, maxLength or enum is too big, or sub-schemas nest "
                  "inline too deeply (each inline level multiplies the states; name a nested sub-schema in "
                  "$defs and $ref it, which compiles it once)");
}

[[noreturn]] void TooSlow() {
  throw MakeError("the grammar is too large to compile (its subset construction took more than ",
                  GrammarBuilder::kMaxSubsetSteps,
                  " steps); a regex whose wildcards, classes or repetitions overlap (such as "
                  ".{0,50}x.{0,50}) has an automaton exponential in its length");
}

// A DFA over byte classes and call letters, as subset construction produces it.
struct ClassDfa {
  std::array<uint8_t, 256> classes{};
  int nclasses = 1;
  std::vector<int32_t> next;  // [state * nclasses + class], -1: none
  std::vector<std::vector<Grammar::Call>> calls;
  std::vector<uint8_t> final;
  size_t size() const { return final.size(); }
};

}  // namespace

// Builds one rule's NFA from the builder's expressions (a friend of GrammarBuilder).
struct NfaBuilder {
  const std::vector<GrammarBuilder::Node>& nodes;
  const std::vector<GrammarBuilder::GraphData>& graphs;
  const std::vector<GrammarBuilder::DfaData>& dfas;
  std::vector<NfaState> states;
  std::vector<ByteSet> sets;
  std::unordered_map<std::array<uint64_t, 4>, int32_t, ByteSetHash> set_index;

  int32_t New() {
    if (states.size() >= GrammarBuilder::kMaxStates) TooLarge();
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }
  int32_t SetIndex(const ByteSet& set) {
    auto [it, inserted] = set_index.emplace(set.words(), static_cast<int32_t>(sets.size()));
    if (inserted) sets.push_back(set);
    return it->second;
  }
  void Eps(int32_t from, int32_t to) { states[from].eps.push_back(to); }

  void Emit(int32_t id, int32_t from, int32_t to) {
    const GrammarBuilder::Node& n = nodes[id];
    using Kind = GrammarBuilder::Kind;
    switch (n.kind) {
      case Kind::kEmpty:
        Eps(from, to);
        return;
      case Kind::kNothing:
        return;
      case Kind::kBytes:
        states[from].bytes.emplace_back(SetIndex(n.bytes), to);
        return;
      case Kind::kSeq: {
        int32_t current = from;
        for (size_t i = 0; i < n.children.size(); ++i) {
          const int32_t next = i + 1 == n.children.size() ? to : New();
          Emit(n.children[i], current, next);
          current = next;
        }
        if (n.children.empty()) Eps(from, to);
        return;
      }
      case Kind::kAlt:
        for (int32_t child : n.children) Emit(child, from, to);
        return;
      case Kind::kRepeat: {
        int32_t current = from;
        for (int64_t i = 0; i < n.min; ++i) {
          const int32_t next = New();
          Emit(n.children[0], current, next);
          current = next;
        }
        if (!n.max) {
          const int32_t loop = New();
          Eps(current, loop);
          Emit(n.children[0], loop, loop);
          Eps(loop, to);
          return;
        }
        for (int64_t i = n.min; i < *n.max; ++i) {
          Eps(current, to);
          const int32_t next = New();
          Emit(n.children[0], current, next);
          current = next;
        }
        Eps(current, to);
        return;
      }
      case Kind::kCall:
        states[from].calls.emplace_back(n.rule, to);
        return;
      case Kind::kGraph: {
        const GrammarBuilder::GraphData& g = graphs[n.data];
        std::vector<int32_t> ids(g.nodes);
        for (int32_t& s : ids) s = New();
        Eps(from, ids[g.start]);
        for (const GrammarBuilder::Edge& e : g.edges) Emit(e.label.id, ids[e.from], ids[e.to]);
        for (int f : g.finals) Eps(ids[f], to);
        return;
      }
      case Kind::kDfa: {
        const GrammarBuilder::DfaData& d = dfas[n.data];
        std::vector<int32_t> ids(d.final.size());
        for (int32_t& s : ids) s = New();
        Eps(from, ids[d.start]);
        for (size_t s = 0; s < d.final.size(); ++s) {
          for (const auto& [set, target] : d.edges[s]) states[ids[s]].bytes.emplace_back(SetIndex(set), ids[target]);
          if (d.final[s]) Eps(ids[s], to);
        }
        return;
      }
    }
  }

  // Subset construction from `start`; `accept` marks final subsets.
  ClassDfa Determinize(int32_t start, int32_t accept) {
    ClassDfa dfa;
    // Byte classes: the coarsest partition of 0..255 that every edge set respects.
    dfa.classes.fill(0);
    for (const ByteSet& set : sets) {
      std::vector<std::array<int, 2>> split(dfa.nclasses, {-1, -1});
      int count = 0;
      for (int b = 0; b < 256; ++b) {
        int& id = split[dfa.classes[b]][set.Has(static_cast<uint8_t>(b)) ? 1 : 0];
        if (id < 0) id = count++;
        dfa.classes[b] = static_cast<uint8_t>(id);
      }
      dfa.nclasses = count;
    }
    std::vector<std::vector<int>> classes_of_set(sets.size());
    for (size_t i = 0; i < sets.size(); ++i) {
      std::vector<uint8_t> seen(dfa.nclasses, 0);
      for (int b = 0; b < 256; ++b) {
        if (sets[i].Has(static_cast<uint8_t>(b)) && !seen[dfa.classes[b]]) {
          seen[dfa.classes[b]] = 1;
          classes_of_set[i].push_back(dfa.classes[b]);
        }
      }
    }

    std::vector<uint32_t> mark(states.size(), 0);
    uint32_t generation = 0;
    std::vector<int32_t> stack;
    const auto closure = [&](std::vector<int32_t>& set) {
      ++generation;
      stack.assign(set.begin(), set.end());
      set.clear();
      while (!stack.empty()) {
        const int32_t s = stack.back();
        stack.pop_back();
        if (mark[s] == generation) continue;
        mark[s] = generation;
        set.push_back(s);
        for (int32_t t : states[s].eps) {
          if (mark[t] != generation) stack.push_back(t);
        }
      }
      std::sort(set.begin(), set.end());
    };

    std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> ids;
    std::vector<std::vector<int32_t>> subsets;
    size_t steps = 0;
    const auto intern = [&](std::vector<int32_t> set) -> int32_t {
      if (set.empty()) return -1;
      closure(set);
      steps += set.size();
      if (steps > GrammarBuilder::kMaxSubsetSteps) TooSlow();
      auto [it, inserted] = ids.emplace(set, static_cast<int32_t>(subsets.size()));
      if (inserted) {
        if (subsets.size() >= GrammarBuilder::kMaxStates) TooLarge();
        subsets.push_back(std::move(set));
      }
      return it->second;
    };
    intern({start});
    std::vector<std::vector<int32_t>> targets(dfa.nclasses);
    for (size_t d = 0; d < subsets.size(); ++d) {
      for (auto& t : targets) t.clear();
      std::map<RuleId, std::vector<int32_t>> call_targets;
      bool final = false;
      for (int32_t s : subsets[d]) {
        final |= s == accept;
        for (const auto& [set, to] : states[s].bytes) {
          for (int c : classes_of_set[set]) targets[c].push_back(to);
        }
        for (const auto& [rule, to] : states[s].calls) call_targets[rule].push_back(to);
      }
      std::vector<int32_t> row(dfa.nclasses);
      for (int c = 0; c < dfa.nclasses; ++c) row[c] = intern(targets[c]);
      std::vector<Grammar::Call> calls;
      for (auto& [rule, to] : call_targets) calls.push_back({rule, intern(to)});
      dfa.next.insert(dfa.next.end(), row.begin(), row.end());
      dfa.calls.push_back(std::move(calls));
      dfa.final.push_back(final ? 1 : 0);
    }
    return dfa;
  }
};

namespace {

// A standalone call-free DFA (Intersect / Subtract operands).
struct DenseDfa {
  std::array<uint8_t, 256> classes{};
  int nclasses = 1;
  std::vector<int32_t> next;
  std::vector<uint8_t> final;
  int32_t Step(int32_t s, uint8_t b) const { return next[s * nclasses + classes[b]]; }
};

// The states of a DFA given as edges that can reach a final state.
std::vector<uint8_t> CoReachable(const std::vector<std::vector<std::pair<ByteSet, int32_t>>>& edges,
                                 const std::vector<uint8_t>& final) {
  std::vector<std::vector<int32_t>> preds(final.size());
  for (size_t s = 0; s < edges.size(); ++s) {
    for (const auto& [set, t] : edges[s]) preds[t].push_back(static_cast<int32_t>(s));
  }
  std::vector<uint8_t> live(final.begin(), final.end());
  std::vector<int32_t> queue;
  for (size_t s = 0; s < final.size(); ++s) {
    if (final[s]) queue.push_back(static_cast<int32_t>(s));
  }
  while (!queue.empty()) {
    const int32_t t = queue.back();
    queue.pop_back();
    for (int32_t p : preds[t]) {
      if (!live[p]) {
        live[p] = 1;
        queue.push_back(p);
      }
    }
  }
  return live;
}

}  // namespace

GrammarBuilder::Expr GrammarBuilder::Add(Node node) {
  if (node.size > kMaxStates) TooLarge();
  nodes_.push_back(std::move(node));
  return Expr{static_cast<int32_t>(nodes_.size() - 1)};
}

GrammarBuilder::Expr GrammarBuilder::Empty() { return Add(Node{.kind = Kind::kEmpty}); }
GrammarBuilder::Expr GrammarBuilder::Nothing() { return Add(Node{.kind = Kind::kNothing}); }

GrammarBuilder::Expr GrammarBuilder::Bytes(ByteSet set) {
  if (set.empty()) return Nothing();
  return Add(Node{.kind = Kind::kBytes, .bytes = set});
}

GrammarBuilder::Expr GrammarBuilder::Literal(std::string_view bytes) {
  std::vector<Expr> parts;
  for (char c : bytes) parts.push_back(Bytes(ByteSet::Of(static_cast<uint8_t>(c))));
  return Seq(std::move(parts));
}

GrammarBuilder::Expr GrammarBuilder::Seq(std::vector<Expr> parts) {
  if (parts.size() == 1) return parts[0];
  Node node{.kind = Kind::kSeq};
  for (Expr e : parts) {
    if (nodes_[e.id].kind == Kind::kNothing) return Nothing();
    if (nodes_[e.id].kind == Kind::kEmpty) continue;
    node.children.push_back(e.id);
    node.size += nodes_[e.id].size;
    node.call_free &= nodes_[e.id].call_free;
  }
  if (node.children.empty()) return Empty();
  if (node.children.size() == 1) return Expr{node.children[0]};
  return Add(std::move(node));
}

GrammarBuilder::Expr GrammarBuilder::Alt(std::vector<Expr> options) {
  Node node{.kind = Kind::kAlt};
  for (Expr e : options) {
    if (nodes_[e.id].kind == Kind::kNothing) continue;
    node.children.push_back(e.id);
    node.size += nodes_[e.id].size;
    node.call_free &= nodes_[e.id].call_free;
  }
  if (node.children.empty()) return Nothing();
  if (node.children.size() == 1) return Expr{node.children[0]};
  return Add(std::move(node));
}

GrammarBuilder::Expr GrammarBuilder::Repeat(Expr e, int64_t min, std::optional<int64_t> max) {
  DI_CHECK(min >= 0 && (!max || *max >= min), "bad repetition {", min, ",", max.value_or(-1), "}");
  if (max && *max == 0) return Empty();
  if (nodes_[e.id].kind == Kind::kNothing) return min == 0 ? Empty() : Nothing();
  if (min == 1 && max && *max == 1) return e;
  const int64_t copies = max ? *max : min + 1;
  const size_t child = nodes_[e.id].size;
  if (copies > static_cast<int64_t>(kMaxStates) || child * static_cast<size_t>(copies) > kMaxStates) TooLarge();
  return Add(Node{.kind = Kind::kRepeat,
                  .children = {e.id},
                  .min = min,
                  .max = max,
                  .size = child * static_cast<size_t>(copies) + 2,
                  .call_free = nodes_[e.id].call_free});
}

GrammarBuilder::Expr GrammarBuilder::Call(RuleId rule) {
  DI_CHECK(rule >= 0 && static_cast<size_t>(rule) < rules_.size(), "unknown rule ", rule);
  return Add(Node{.kind = Kind::kCall, .rule = rule, .call_free = false});
}

GrammarBuilder::Expr GrammarBuilder::Graph(int nodes, int start, std::vector<int> finals, std::vector<Edge> edges) {
  Node node{.kind = Kind::kGraph, .size = static_cast<size_t>(nodes)};
  for (const Edge& e : edges) {
    DI_CHECK(e.from >= 0 && e.from < nodes && e.to >= 0 && e.to < nodes, "graph edge outside the graph");
    node.size += nodes_[e.label.id].size;
    node.call_free &= nodes_[e.label.id].call_free;
  }
  node.data = static_cast<int32_t>(graphs_.size());
  graphs_.push_back(GraphData{nodes, start, std::move(finals), std::move(edges)});
  return Add(std::move(node));
}

bool GrammarBuilder::IsCallFree(Expr e) const { return nodes_[e.id].call_free; }

GrammarBuilder::DfaData GrammarBuilder::ToDfa(Expr e) const {
  DI_CHECK(IsCallFree(e), "Intersect/Subtract need call-free expressions");
  NfaBuilder nfa{nodes_, graphs_, dfas_, {}, {}, {}};
  const int32_t start = nfa.New();
  const int32_t accept = nfa.New();
  nfa.Emit(e.id, start, accept);
  const ClassDfa dfa = nfa.Determinize(start, accept);
  DfaData out{0, dfa.final, std::vector<std::vector<std::pair<ByteSet, int32_t>>>(dfa.size())};
  for (size_t s = 0; s < dfa.size(); ++s) {
    std::map<int32_t, ByteSet> by_target;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.next[s * dfa.nclasses + dfa.classes[b]];
      if (t >= 0) by_target[t].Add(static_cast<uint8_t>(b));
    }
    for (const auto& [t, set] : by_target) out.edges[s].emplace_back(set, t);
  }
  return out;
}

namespace {

DenseDfa Densify(const std::vector<std::vector<std::pair<ByteSet, int32_t>>>& edges,
                 const std::vector<uint8_t>& final) {
  DenseDfa d;
  d.final = final;
  // Classes: bytes with the same target in every state.
  std::map<std::vector<int32_t>, int> signature_class;
  std::vector<std::vector<int32_t>> columns;
  for (int b = 0; b < 256; ++b) {
    std::vector<int32_t> column(final.size(), -1);
    for (size_t s = 0; s < final.size(); ++s) {
      for (const auto& [set, t] : edges[s]) {
        if (set.Has(static_cast<uint8_t>(b))) column[s] = t;
      }
    }
    auto [it, inserted] = signature_class.emplace(column, static_cast<int>(columns.size()));
    if (inserted) columns.push_back(column);
    d.classes[b] = static_cast<uint8_t>(it->second);
  }
  d.nclasses = static_cast<int>(columns.size());
  d.next.assign(final.size() * d.nclasses, -1);
  for (size_t s = 0; s < final.size(); ++s) {
    for (int c = 0; c < d.nclasses; ++c) d.next[s * d.nclasses + c] = columns[c][s];
  }
  return d;
}

}  // namespace

GrammarBuilder::Expr GrammarBuilder::Intersect(Expr a, Expr b) { return Product(a, b, /*subtract=*/false); }
GrammarBuilder::Expr GrammarBuilder::Subtract(Expr a, Expr b) { return Product(a, b, /*subtract=*/true); }

GrammarBuilder::Expr GrammarBuilder::Product(Expr a, Expr b, bool subtract) {
  const DfaData da = ToDfa(a), db = ToDfa(b);
  const DenseDfa x = Densify(da.edges, da.final), y = Densify(db.edges, db.final);
  DfaData out{0, {}, {}};
  // q == -1 (Subtract only): b is dead, the text is in b whatever follows.
  std::map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  const auto id = [&](int32_t p, int32_t q) {
    auto [it, inserted] = ids.emplace(std::make_pair(p, q), static_cast<int32_t>(pairs.size()));
    if (inserted) {
      if (pairs.size() >= kMaxStates) TooLarge();
      pairs.emplace_back(p, q);
    }
    return it->second;
  };
  id(da.start, db.start);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [p, q] = pairs[i];
    std::map<int32_t, ByteSet> by_target;
    for (int c = 0; c < 256; ++c) {
      const int32_t np = x.Step(p, static_cast<uint8_t>(c));
      const int32_t nq = q < 0 ? -1 : y.Step(q, static_cast<uint8_t>(c));
      if (np < 0 || (nq < 0 && !subtract)) continue;
      by_target[id(np, nq)].Add(static_cast<uint8_t>(c));
    }
    out.edges.emplace_back();
    for (const auto& [t, set] : by_target) out.edges.back().emplace_back(set, t);
    const bool in_b = q >= 0 && y.final[q];
    out.final.push_back(x.final[p] && (subtract ? !in_b : in_b));
  }
  const std::vector<uint8_t> live = CoReachable(out.edges, out.final);
  if (!live[out.start]) return Nothing();
  for (auto& edges : out.edges) {
    std::erase_if(edges, [&](const std::pair<ByteSet, int32_t>& e) { return !live[e.second]; });
  }
  Node node{.kind = Kind::kDfa, .data = static_cast<int32_t>(dfas_.size()), .size = out.final.size() + 1};
  dfas_.push_back(std::move(out));
  return Add(std::move(node));
}

RuleId GrammarBuilder::DeclareRule(std::string name) {
  rules_.push_back(RuleDef{std::move(name), Grammar::RuleKind::kAutomaton, std::nullopt, -1});
  return static_cast<RuleId>(rules_.size() - 1);
}

void GrammarBuilder::DefineRule(RuleId rule, Expr body) {
  DI_CHECK(rule >= 0 && static_cast<size_t>(rule) < rules_.size() && !rules_[rule].body &&
               rules_[rule].kind == Grammar::RuleKind::kAutomaton,
           "rule ", rule, " defined twice or unknown");
  rules_[rule].body = body;
}

RuleId GrammarBuilder::NumberRule(std::string name, NumberRange range) {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].kind == Grammar::RuleKind::kNumber && number_ranges_[rules_[i].number_range] == range) {
      return static_cast<RuleId>(i);
    }
  }
  number_ranges_.push_back(std::move(range));
  rules_.push_back(RuleDef{std::move(name), Grammar::RuleKind::kNumber, std::nullopt,
                           static_cast<int32_t>(number_ranges_.size() - 1)});
  return static_cast<RuleId>(rules_.size() - 1);
}

RuleId GrammarBuilder::MakeRule(std::string name, Expr body) {
  const RuleId rule = DeclareRule(std::move(name));
  DefineRule(rule, body);
  return rule;
}

std::shared_ptr<const Grammar> GrammarBuilder::Build(RuleId root) const {
  DI_CHECK(root >= 0 && static_cast<size_t>(root) < rules_.size(), "unknown root rule ", root);
  // Rules reachable from the root, numbered in discovery order (the root is 0).
  std::vector<RuleId> order = {root};
  std::vector<RuleId> new_id(rules_.size(), -1);
  new_id[root] = 0;
  std::vector<uint8_t> seen(nodes_.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) {
    const RuleDef& def = rules_[order[i]];
    if (def.kind == Grammar::RuleKind::kNumber) continue;
    if (!def.body) throw MakeError("grammar rule '", def.name, "' is used but never defined");
    std::vector<int32_t> stack = {def.body->id};
    while (!stack.empty()) {
      const int32_t id = stack.back();
      stack.pop_back();
      if (seen[id]) continue;
      seen[id] = 1;
      const Node& n = nodes_[id];
      if (n.call_free) continue;
      if (n.kind == Kind::kCall && new_id[n.rule] < 0) {
        new_id[n.rule] = static_cast<RuleId>(order.size());
        order.push_back(n.rule);
      }
      for (int32_t c : n.children) stack.push_back(c);
      if (n.kind == Kind::kGraph) {
        for (const Edge& e : graphs_[n.data].edges) stack.push_back(e.label.id);
      }
    }
  }

  auto grammar = std::shared_ptr<Grammar>(new Grammar());
  Grammar& g = *grammar;
  g.root_ = 0;
  std::vector<ClassDfa> dfas(order.size());
  std::vector<int32_t> offset(order.size(), 0);
  size_t total = 0;
  for (size_t r = 0; r < order.size(); ++r) {
    const RuleDef& def = rules_[order[r]];
    Grammar::Rule rule{def.name, def.kind, -1, 0, -1};
    if (def.kind == Grammar::RuleKind::kNumber) {
      rule.number_range = static_cast<int32_t>(g.number_ranges_.size());
      g.number_ranges_.push_back(number_ranges_[def.number_range]);
    } else {
      NfaBuilder nfa{nodes_, graphs_, dfas_, {}, {}, {}};
      const int32_t start = nfa.New();
      const int32_t accept = nfa.New();
      nfa.Emit(def.body->id, start, accept);
      dfas[r] = nfa.Determinize(start, accept);
      offset[r] = static_cast<int32_t>(total);
      total += dfas[r].size();
      if (total > kMaxStates) TooLarge();
      rule.start_state = offset[r];
      rule.classes = static_cast<int32_t>(g.byte_class_.size());
      g.byte_class_.push_back(dfas[r].classes);
    }
    g.rules_.push_back(std::move(rule));
  }

  // Global state tables.
  g.state_rule_.resize(total);
  g.flags_.assign(total, 0);
  g.row_.resize(total);
  g.call_begin_.assign(total + 1, 0);
  std::vector<std::vector<Grammar::Call>> calls(total);
  for (size_t r = 0; r < order.size(); ++r) {
    if (g.rules_[r].kind == Grammar::RuleKind::kNumber) continue;
    const ClassDfa& d = dfas[r];
    for (size_t s = 0; s < d.size(); ++s) {
      const int32_t id = offset[r] + static_cast<int32_t>(s);
      g.state_rule_[id] = static_cast<RuleId>(r);
      g.row_[id] = static_cast<uint32_t>(g.next_.size());
      for (int c = 0; c < d.nclasses; ++c) {
        const int32_t t = d.next[s * d.nclasses + c];
        g.next_.push_back(t < 0 ? -1 : offset[r] + t);
      }
      if (d.final[s]) g.flags_[id] |= Grammar::kFinal;
      for (const Grammar::Call& call : d.calls[s]) {
        calls[id].push_back({new_id[call.rule], offset[r] + call.return_state});
      }
    }
  }

  // Trim: a state is live if it reaches a final state of its rule through byte edges and calls
  // of productive rules; a rule is productive if its start state is live (a number rule if its
  // range holds a value). Worklist over reverse edges.
  std::vector<uint8_t> live(total, 0), productive(order.size(), 0);
  std::vector<std::vector<int32_t>> byte_preds(total);
  std::vector<std::vector<std::pair<int32_t, RuleId>>> return_preds(total);     // (caller state, callee)
  std::vector<std::vector<std::pair<int32_t, int32_t>>> callers(order.size());  // (caller state, return)
  for (size_t s = 0; s < total; ++s) {
    const int nclasses = dfas[g.state_rule_[s]].nclasses;
    for (int c = 0; c < nclasses; ++c) {
      const int32_t t = g.next_[g.row_[s] + c];
      if (t >= 0) byte_preds[t].push_back(static_cast<int32_t>(s));
    }
    for (const Grammar::Call& call : calls[s]) {
      return_preds[call.return_state].emplace_back(static_cast<int32_t>(s), call.rule);
      callers[call.rule].emplace_back(static_cast<int32_t>(s), call.return_state);
    }
  }
  std::vector<int32_t> queue;
  const auto make_live = [&](int32_t s) {
    if (!live[s]) {
      live[s] = 1;
      queue.push_back(s);
    }
  };
  const auto make_productive = [&](RuleId r) {
    if (productive[r]) return;
    productive[r] = 1;
    for (const auto& [caller, ret] : callers[r]) {
      if (live[ret]) make_live(caller);
    }
  };
  for (size_t s = 0; s < total; ++s) {
    if (g.flags_[s] & Grammar::kFinal) make_live(static_cast<int32_t>(s));
  }
  for (size_t r = 0; r < order.size(); ++r) {
    if (g.rules_[r].kind == Grammar::RuleKind::kNumber && g.number_ranges_[g.rules_[r].number_range].HasValue()) {
      make_productive(static_cast<RuleId>(r));
    }
  }
  while (!queue.empty()) {
    const int32_t t = queue.back();
    queue.pop_back();
    for (int32_t p : byte_preds[t]) make_live(p);
    for (const auto& [caller, callee] : return_preds[t]) {
      if (productive[callee]) make_live(caller);
    }
    const RuleId r = g.state_rule_[t];
    if (g.rules_[r].start_state == t) make_productive(r);
  }
  if (!productive[0]) {
    throw MakeError("the constraint admits no output at all (rule '", g.rules_[0].name, "' has no valid value)");
  }
  for (size_t s = 0; s < total; ++s) {
    const int nclasses = dfas[g.state_rule_[s]].nclasses;
    for (int c = 0; c < nclasses; ++c) {
      int32_t& t = g.next_[g.row_[s] + c];
      if (t >= 0 && !live[t]) t = -1;
      if (t >= 0) g.flags_[s] |= Grammar::kHasBytes;
    }
    std::erase_if(calls[s], [&](const Grammar::Call& c) { return !productive[c.rule] || !live[c.return_state]; });
    if (!calls[s].empty()) g.flags_[s] |= Grammar::kHasCalls;
    g.call_begin_[s + 1] = g.call_begin_[s] + static_cast<uint32_t>(calls[s].size());
    g.calls_.insert(g.calls_.end(), calls[s].begin(), calls[s].end());
  }

  // Left recursion: a rule reaching a call of itself without consuming a byte would make the
  // matcher's closure push forever. nullable: the rule can complete without bytes.
  std::vector<uint8_t> nullable(order.size(), 0);
  const auto epsilon_reach = [&](RuleId r, std::vector<RuleId>* callees) {
    // States of r reachable from its start through calls of nullable rules; whether a final
    // state is among them; every rule called from those states.
    bool reaches_final = false;
    std::vector<int32_t> stack = {g.rules_[r].start_state};
    std::vector<int32_t> visited;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (std::find(visited.begin(), visited.end(), s) != visited.end()) continue;
      visited.push_back(s);
      reaches_final |= (g.flags_[s] & Grammar::kFinal) != 0;
      for (const Grammar::Call& c : g.calls(s)) {
        if (callees) callees->push_back(c.rule);
        if (nullable[c.rule]) stack.push_back(c.return_state);
      }
    }
    return reaches_final;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < order.size(); ++r) {
      if (nullable[r] || g.rules_[r].kind == Grammar::RuleKind::kNumber || !productive[r]) continue;
      if (epsilon_reach(static_cast<RuleId>(r), nullptr)) nullable[r] = 1, changed = true;
    }
  }
  std::vector<std::vector<RuleId>> left_calls(order.size());
  for (size_t r = 0; r < order.size(); ++r) {
    if (g.rules_[r].kind == Grammar::RuleKind::kAutomaton && productive[r]) {
      epsilon_reach(static_cast<RuleId>(r), &left_calls[r]);
    }
  }
  std::vector<int> color(order.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<RuleId> path;
  const std::function<void(RuleId)> visit = [&](RuleId r) {
    color[r] = 1;
    path.push_back(r);
    for (RuleId callee : left_calls[r]) {
      if (color[callee] == 1) {
        std::string cycle;
        for (auto it = std::find(path.begin(), path.end(), callee); it != path.end(); ++it) {
          cycle += "'" + g.rules_[*it].name + "' -> ";
        }
        throw MakeError("left recursion: ", cycle, "'", g.rules_[callee].name,
                        "' calls itself before matching any byte");
      }
      if (color[callee] == 0) visit(callee);
    }
    path.pop_back();
    color[r] = 2;
  };
  for (size_t r = 0; r < order.size(); ++r) {
    if (color[r] == 0) visit(static_cast<RuleId>(r));
  }
  return grammar;
}

ByteSet Grammar::bytes(int32_t state) const {
  ByteSet set;
  for (int b = 0; b < 256; ++b) {
    if (Next(state, static_cast<uint8_t>(b)) >= 0) set.Add(static_cast<uint8_t>(b));
  }
  return set;
}

}  // namespace deepinfer
