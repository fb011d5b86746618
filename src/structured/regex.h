// Regular expressions for constrained decoding: vLLM's `regex` output constraint (the whole
// output matches) and JSON Schema's `pattern` (the string value contains a match).
//
// Supported syntax (Python `re` / ECMAScript common ground, over Unicode code points):
//   literals (UTF-8), '.' (any character but "\n"), [...] and [^...] classes with ranges,
//   escapes \d \D \w \W \s \S (ASCII: [0-9], [A-Za-z0-9_], [ \t\n\r\f\v]), \t \n \r \f \v \0
//   \xHH \uHHHH \x{H...}, any escaped punctuation; groups (...) (?:...) (?P<name>...)
//   (?<name>...); alternation |; quantifiers * + ? {n} {n,} {n,m} and their lazy forms
//   (laziness does not change which texts match); ^ at the start and $ at the end of a
//   top-level alternative ($ is the end of the text, as in ECMAScript).
// Anything else is an Error naming it: backreferences, lookaround, \b \B \A \z \Z, possessive
// quantifiers, inline flags, Unicode property classes, POSIX classes, anchors inside groups.
#pragma once

#include <string_view>

#include "structured/codepoints.h"
#include "structured/grammar.h"

namespace deepinfer {

struct RegexOptions {
  enum class Spelling { kUtf8, kJsonString };
  // kUtf8: the text itself; kJsonString: the inside of a JSON string literal, every spelling.
  Spelling spelling = Spelling::kUtf8;
  // Search semantics (JSON Schema's pattern): text before and after the match is free unless
  // the alternative is anchored. Otherwise the whole text must match.
  bool search = false;
  CodepointSet never_raw = {};  // kJsonString: characters that must be escaped
};

// Throws Error ("regex /.../: unsupported ... at offset N").
GrammarBuilder::Expr CompileRegex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options);

}  // namespace deepinfer
