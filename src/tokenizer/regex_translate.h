// HF `tokenizers` runs pre-tokenizer regexes with Oniguruma (Ruby syntax, Unicode 16.0 tables);
// we run them with PCRE2 (UTF + UCP). The syntax used by tokenizer files is shared, but a few
// escapes mean different things, and the Debian PCRE2 knows only Unicode 14.0. This rewrites a
// pattern so PCRE2 matches what Oniguruma matches:
//   \s, \S  -> the White_Space set (PCRE2 also counts U+180E as space; Oniguruma does not)
//   \p{X}, \P{X}, \d -> the PCRE2 class plus the code points Unicode 15.0-16.0 added to it
//   \h, \H  -> hex digits (Oniguruma's meaning; PCRE2's \h is horizontal space)
// Anything else is passed through unchanged. Constructs that cannot be translated faithfully
// (Oniguruma nested classes, negated escapes inside a class that would need additions) throw.
#pragma once

#include <string>
#include <string_view>

namespace deepinfer {

std::string TranslateOnigurumaPattern(std::string_view pattern);

}  // namespace deepinfer
