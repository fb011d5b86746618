#include "structured/json_grammar.h"

#include "core/error.h"

namespace deepinfer {

JsonGrammar::JsonGrammar(GrammarBuilder& b, CodepointSet never_raw) : b_(b), never_raw_(std::move(never_raw)) {}

GrammarBuilder::Expr JsonGrammar::Ws() {
  return b_.Optional(
      b_.Alt({b_.Literal(" "), b_.Seq({b_.Literal("\n"), b_.Repeat(b_.Bytes(ByteSet::Chars(" \t")), 0, kMaxIndent)})}));
}

GrammarBuilder::Expr JsonGrammar::AnyString() {
  return b_.Seq({b_.Literal("\""), b_.Star(Char(CodepointSet::All())), b_.Literal("\"")});
}

GrammarBuilder::Expr JsonGrammar::Integer() {
  return b_.Seq({b_.Optional(b_.Literal("-")),
                 b_.Alt({b_.Literal("0"),
                         b_.Seq({b_.Bytes(ByteSet::Range('1', '9')), b_.Star(b_.Bytes(ByteSet::Range('0', '9')))})})});
}

GrammarBuilder::Expr JsonGrammar::Number() {
  const auto digits = [&] { return b_.Repeat(b_.Bytes(ByteSet::Range('0', '9')), 1, std::nullopt); };
  return b_.Seq(
      {Integer(), b_.Optional(b_.Seq({b_.Literal("."), digits()})),
       b_.Optional(b_.Seq({b_.Bytes(ByteSet::Chars("eE")), b_.Optional(b_.Bytes(ByteSet::Chars("+-"))), digits()}))});
}

GrammarBuilder::Expr JsonGrammar::NumberIn(const NumberRange& range) {
  if (!range.lower && !range.upper) return range.kind == NumberRange::Kind::kInteger ? Integer() : Number();
  return b_.Call(b_.NumberRule(range.Describe(), range));
}

GrammarBuilder::Expr JsonGrammar::ValueBody(RuleId value, bool strings) {
  // object ::= "{" (ws member (ws "," ws member)*)? ws "}", member ::= string ws ":" ws value
  const auto member = [&] { return b_.Seq({AnyString(), Ws(), b_.Literal(":"), Ws(), b_.Call(value)}); };
  const Expr object = b_.Seq(
      {b_.Literal("{"), b_.Optional(b_.Seq({Ws(), member(), b_.Star(b_.Seq({Ws(), b_.Literal(","), Ws(), member()}))})),
       Ws(), b_.Literal("}")});
  const Expr array = b_.Seq(
      {b_.Literal("["),
       b_.Optional(b_.Seq({Ws(), b_.Call(value), b_.Star(b_.Seq({Ws(), b_.Literal(","), Ws(), b_.Call(value)}))})),
       Ws(), b_.Literal("]")});
  std::vector<Expr> options = {object, array, Number(), b_.Literal("true"), b_.Literal("false"), b_.Literal("null")};
  if (strings) options.push_back(AnyString());
  return b_.Alt(std::move(options));
}

RuleId JsonGrammar::AnyRule(bool strings) {
  if (!any_value_) {
    any_value_ = b_.DeclareRule("json value");
    b_.DefineRule(*any_value_, ValueBody(*any_value_, true));
  }
  if (strings) return *any_value_;
  if (!any_non_string_) {
    any_non_string_ = b_.DeclareRule("json value (not a string)");
    b_.DefineRule(*any_non_string_, ValueBody(*any_value_, false));
  }
  return *any_non_string_;
}

GrammarBuilder::Expr JsonGrammar::AnyValue(bool strings) { return b_.Call(AnyRule(strings)); }
Decimal JsonNumberValue(const nlohmann::ordered_json& number) {
  if (number.is_number_unsigned()) return Decimal::FromUint(number.get<uint64_t>());
  if (number.is_number_integer()) return Decimal::FromInt(number.get<int64_t>());
  DI_CHECK(number.is_number_float());
  return Decimal::FromDouble(number.get<double>());
}

GrammarBuilder::Expr JsonGrammar::Literal(const nlohmann::ordered_json& value, bool integer_numbers) {
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::null:
      return b_.Literal("null");
    case nlohmann::ordered_json::value_t::boolean:
      return b_.Literal(value.get<bool>() ? "true" : "false");
    case nlohmann::ordered_json::value_t::string:
      return StringLiteral(value.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Expr> parts = {b_.Literal("[")};
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) parts.insert(parts.end(), {Ws(), b_.Literal(",")});
        parts.push_back(Ws());
        parts.push_back(Literal(value[i]));
      }
      parts.push_back(Ws());
      parts.push_back(b_.Literal("]"));
      return b_.Seq(std::move(parts));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<Expr> parts = {b_.Literal("{")};
      bool first = true;
      for (const auto& [key, member] : value.items()) {
        if (!first) parts.insert(parts.end(), {Ws(), b_.Literal(",")});
        first = false;
        parts.insert(parts.end(), {Ws(), StringLiteral(key), Ws(), b_.Literal(":"), Ws(), Literal(member)});
      }
      parts.push_back(Ws());
      parts.push_back(b_.Literal("}"));
      return b_.Seq(std::move(parts));
    }
    default: {
      const Decimal v = JsonNumberValue(value);
      NumberRange range;
      range.kind = integer_numbers ? NumberRange::Kind::kInteger : NumberRange::Kind::kNumber;
      range.lower = range.upper = NumberBound{v, false};
      return b_.Call(b_.NumberRule(range.Describe(), range));
    }
  }
}

}  // namespace deepinfer
