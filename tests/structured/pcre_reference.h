// PCRE2 as the reference regex engine of the tests: compiled once, matched with the DFA
// algorithm (no backtracking, so nested quantifiers stay polynomial), whole subject only.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

class PcreReference {
 public:
  // `utf`: patterns and subjects are UTF-8 and '.' / classes match code points (no UCP: \d \w
  // \s stay ASCII). `search`: unanchored (JSON Schema's pattern), else a whole-subject match.
  explicit PcreReference(std::string_view pattern, bool utf = false, bool search = false) : search_(search) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // DOLLAR_ENDONLY: '$' is the end of the text (ECMAScript), not also before a final newline.
    const uint32_t options = PCRE2_DOLLAR_ENDONLY | (utf ? PCRE2_UTF : 0) | (search ? 0 : PCRE2_ANCHORED);
    // \z: the very end (a '$' would also match before a final newline).
    const std::string wrapped = search ? std::string(pattern) : "(?:" + std::string(pattern) + ")\\z";
    code_.reset(
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(wrapped.data()), wrapped.size(), options, &error, &offset, nullptr));
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      throw std::runtime_error("pcre2 cannot compile '" + std::string(pattern) +
                               "': " + reinterpret_cast<const char*>(message));
    }
    data_.reset(pcre2_match_data_create(64, nullptr));
  }

  bool Matches(std::string_view subject) const {
    std::vector<int> workspace(4096);
    const int rc =
        pcre2_dfa_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0,
                        search_ ? 0 : PCRE2_ANCHORED, data_.get(), nullptr, workspace.data(), workspace.size());
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0 && rc != PCRE2_ERROR_DFA_WSSIZE)
      throw std::runtime_error("pcre2_dfa_match failed: " + std::to_string(rc));
    return rc >= 0;
  }

 private:
  struct CodeFree {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  struct DataFree {
    void operator()(pcre2_match_data* d) const { pcre2_match_data_free(d); }
  };
  bool search_;
  std::unique_ptr<pcre2_code, CodeFree> code_;
  std::unique_ptr<pcre2_match_data, DataFree> data_;
};

}  // namespace deepinfer
