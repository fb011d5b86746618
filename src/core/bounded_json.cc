#include "core/bounded_json.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

// Where in the document the parser is, for messages: "/text_config/eos_token_id/0".
class JsonPath {
 public:
  void EnterObject() { segments_.push_back({true, 0, {}}); }
  void EnterArray() { segments_.push_back({false, 0, {}}); }
  void Leave() { segments_.pop_back(); }
  void Key(const std::string& key) { segments_.back().key = key; }
  // Called before each array element's value.
  void NextElement() {
    if (!segments_.empty() && !segments_.back().is_object) ++segments_.back().index;
  }

  std::string ToString() const {
    std::string out;
    for (const Segment& s : segments_) {
      if (out.size() > 200) return out + "/...";
      out += '/';
      out += s.is_object ? Printable(s.key, 60) : std::to_string(s.index - 1);
    }
    return out.empty() ? "/" : out;
  }

 private:
  struct Segment {
    bool is_object;
    size_t index;  // elements seen so far in an array
    std::string key;
  };
  std::vector<Segment> segments_;
};

// Builds a DOM from SAX events, checking depth and duplicate keys as they arrive. Returning
// false from an event stops nlohmann's (iterative) parser at once.
template <typename BasicJson>
class BoundedDomBuilder {
 public:
  using number_integer_t = typename BasicJson::number_integer_t;
  using number_unsigned_t = typename BasicJson::number_unsigned_t;
  using number_float_t = typename BasicJson::number_float_t;
  using string_t = typename BasicJson::string_t;
  using binary_t = typename BasicJson::binary_t;
  using object_t = typename BasicJson::object_t;
  using array_t = typename BasicJson::array_t;
  static constexpr bool kOrdered = std::is_same_v<BasicJson, nlohmann::ordered_json>;

  BoundedDomBuilder(BasicJson& root, std::string_view source, const JsonLimits& limits)
      : root_(root), source_(source), max_depth_(limits.max_depth), duplicates_(limits.duplicates) {}

  bool null() { return Put(nullptr) != nullptr; }
  bool boolean(bool value) { return Put(value) != nullptr; }
  bool number_integer(number_integer_t value) { return Put(value) != nullptr; }
  bool number_unsigned(number_unsigned_t value) { return Put(value) != nullptr; }
  bool number_float(number_float_t value, const string_t&) { return Put(value) != nullptr; }
  bool string(string_t& value) { return Put(std::move(value)) != nullptr; }
  bool binary(binary_t&) { return Fail(detail::Concat("binary values are not JSON (at ", path_.ToString(), ")")); }

  bool start_object(size_t) { return Open(BasicJson::value_t::object); }
  bool start_array(size_t) { return Open(BasicJson::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(string_t& key) {
    path_.Key(key);
    auto& object = stack_.back()->template get_ref<object_t&>();
    if constexpr (kOrdered) {
      // ordered_map looks keys up linearly; a hash index per open object keeps this linear overall.
      auto& members = static_cast<typename object_t::Container&>(object);
      const auto [it, inserted] = key_indexes_.back().try_emplace(key, members.size());
      if (!inserted) {
        if (duplicates_ == DuplicateKeys::kReject) return Duplicate(key);
        slot_ = &members[it->second].second;
        return true;
      }
      members.emplace_back(std::move(key), nullptr);
      slot_ = &members.back().second;
    } else {
      const auto [it, inserted] = object.emplace(std::move(key), nullptr);
      if (!inserted && duplicates_ == DuplicateKeys::kReject) return Duplicate(it->first);
      slot_ = &it->second;
    }
    return true;
  }

  template <typename Exception>
  bool parse_error(size_t, const std::string&, const Exception& error) {
    return Fail(detail::Concat("not valid JSON: ", detail::JsonErrorReason(error)));
  }

  const std::string& error() const { return error_; }

 private:
  bool Fail(const std::string& message) {
    if (error_.empty()) error_ = detail::Concat(source_, ": ", message);
    return false;
  }
  bool Duplicate(const std::string& key) {
    return Fail(
        detail::Concat("key '", Printable(key, 100), "' appears twice in one object (at ", path_.ToString(), ")"));
  }

  // Places a new value where the parser is (root, array element or the pending object member).
  template <typename Value>
  BasicJson* Put(Value&& value) {
    if (stack_.empty()) {
      root_ = BasicJson(std::forward<Value>(value));
      return &root_;
    }
    BasicJson& parent = *stack_.back();
    if (parent.is_array()) {
      path_.NextElement();
      auto& array = parent.template get_ref<array_t&>();
      array.emplace_back(std::forward<Value>(value));
      return &array.back();
    }
    *slot_ = BasicJson(std::forward<Value>(value));
    return slot_;
  }

  bool Open(typename BasicJson::value_t type) {
    BasicJson* value = Put(type);  // first, so that the path below names this value's position
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      return Fail(detail::Concat("JSON nested deeper than ", max_depth_, " levels (at ", path_.ToString(), ")"));
    }
    stack_.push_back(value);
    if (type == BasicJson::value_t::object) {
      path_.EnterObject();
      if constexpr (kOrdered) key_indexes_.emplace_back();
    } else {
      path_.EnterArray();
    }
    return true;
  }

  bool Close() {
    if constexpr (kOrdered) {
      if (stack_.back()->is_object()) key_indexes_.pop_back();
    }
    stack_.pop_back();
    path_.Leave();
    return true;
  }

  BasicJson& root_;
  std::string_view source_;
  int max_depth_;
  DuplicateKeys duplicates_;
  std::vector<BasicJson*> stack_;                                     // the open arrays and objects, outermost first
  BasicJson* slot_ = nullptr;                                         // the member the last key() created
  std::vector<std::unordered_map<std::string, size_t>> key_indexes_;  // ordered_json only: key -> member
  JsonPath path_;
  std::string error_;
};

template <typename BasicJson>
BasicJson ParseBounded(std::string_view text, std::string_view source, const JsonLimits& limits) {
  detail::CheckJsonSize(text, source, limits);
  BasicJson root;
  BoundedDomBuilder<BasicJson> builder(root, source, limits);
  bool ok = false;
  try {
    ok = BasicJson::sax_parse(text.data(), text.data() + text.size(), &builder);
  } catch (const std::bad_alloc&) {
    throw MakeError(source, ": out of memory while parsing ", text.size(), " bytes of JSON");
  } catch (const std::exception& e) {  // nlohmann reports through parse_error; this is a safety net
    throw MakeError(source, ": not valid JSON: ", detail::JsonErrorReason(e));
  }
  if (!ok || !builder.error().empty()) {
    throw Error(builder.error().empty() ? detail::Concat(source, ": not valid JSON") : builder.error());
  }
  return root;
}

// Depth at which BoundedDump stops descending.
constexpr int kDumpDepth = 8;

template <typename BasicJson>
void AppendBounded(const BasicJson& value, int depth, size_t max_chars, std::string& out) {
  if (out.size() > max_chars) return;
  if (value.is_array() || value.is_object()) {
    const bool array = value.is_array();
    if (value.empty()) {
      out += array ? "[]" : "{}";
      return;
    }
    if (depth >= kDumpDepth) {
      out += array ? "[...]" : "{...}";
      return;
    }
    out += array ? '[' : '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() <= max_chars; ++it) {
      if (!first) out += ',';
      first = false;
      if (!array) {
        out += BasicJson(it.key()).dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
        out += ':';
      }
      AppendBounded(*it, depth + 1, max_chars, out);
    }
    out += array ? ']' : '}';
    return;
  }
  if (value.is_string()) {
    // Only a prefix is serialized, so a huge string costs no more than a short one.
    const std::string& text = value.template get_ref<const std::string&>();
    const BasicJson prefix(text.substr(0, max_chars + 1));
    out += prefix.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
    return;
  }
  out += value.dump();
}

template <typename BasicJson>
std::string DumpBounded(const BasicJson& value, size_t max_chars) {
  std::string out;
  AppendBounded(value, 0, max_chars, out);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    out += "...";
  }
  return out;
}

}  // namespace

namespace detail {

std::string JsonErrorReason(const std::exception& error) {
  // what() is "[json.exception.parse_error.101] parse error at line 1, column 9: ..."; the
  // bracketed id means nothing to a user.
  std::string_view reason = error.what();
  if (reason.starts_with("[json.exception.")) {
    if (const size_t end = reason.find("] "); end != std::string_view::npos) reason.remove_prefix(end + 2);
  }
  return Printable(reason, 300);
}

void CheckJsonSize(std::string_view text, std::string_view source, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    throw MakeError(source, ": ", text.size(), " bytes exceed the ", limits.max_bytes, "-byte limit for this file");
  }
}

}  // namespace detail

nlohmann::json ParseJsonBounded(std::string_view text, std::string_view source, const JsonLimits& limits) {
  return ParseBounded<nlohmann::json>(text, source, limits);
}

nlohmann::ordered_json ParseOrderedJsonBounded(std::string_view text, std::string_view source,
                                               const JsonLimits& limits) {
  return ParseBounded<nlohmann::ordered_json>(text, source, limits);
}

std::string BoundedDump(const nlohmann::json& value, size_t max_chars) { return DumpBounded(value, max_chars); }
std::string BoundedDump(const nlohmann::ordered_json& value, size_t max_chars) { return DumpBounded(value, max_chars); }

int JsonNestingDepth(const nlohmann::json& value, int stop_at) {
  int deepest = 1;
  std::vector<std::pair<const nlohmann::json*, int>> pending = {{&value, 1}};
  while (!pending.empty()) {
    const auto [node, depth] = pending.back();
    pending.pop_back();
    deepest = std::max(deepest, depth);
    if (deepest >= stop_at) return stop_at;
    if (!node->is_structured()) continue;
    for (const nlohmann::json& child : *node) {
      if (child.is_structured()) pending.push_back({&child, depth + 1});
    }
  }
  return deepest;
}

}  // namespace deepinfer
