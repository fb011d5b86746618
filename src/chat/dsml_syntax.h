// The two regular expressions of the official DSML tool-call parser, as exact hand-written
// matchers (Python re semantics: DOTALL, lazy groups, '$' matching at the end or before one final
// newline, '\s' meaning Unicode whitespace as Python's str.isspace sees it).
#pragma once

#include <string>
#include <string_view>

namespace deepinfer::dsml {

// Length in bytes of the Python-whitespace character (UTF-8) starting at text[pos], or 0.
std::size_t PythonSpaceLength(std::string_view text, std::size_t pos);

// re.findall(r'^\s*name="(.*?)">\n$', header, re.DOTALL) finding exactly one match: the text
// between "<｜DSML｜ invoke" and the next parameter or invoke-end token.
bool MatchInvokeHeader(std::string_view header, std::string* name);

// re.findall(r'^ name="(.*?)" string="(true|false)">(.*?)<$', text, re.DOTALL) finding exactly
// one match: the text between "<｜DSML｜ parameter" and the next "/｜DSML｜ parameter".
bool MatchParameter(std::string_view text, std::string* name, bool* is_string, std::string* value);

}  // namespace deepinfer::dsml
