// A PCRE2 pattern compiled once (UTF, Unicode classes, JIT where the platform has it) and matched
// from any number of threads: each thread keeps its own match data and JIT stack.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace tetra::data::tok {

class Pcre2Pattern {
 public:
  // A Data error naming the pattern and PCRE2's message where it does not compile.
  explicit Pcre2Pattern(const std::string& pattern);
  ~Pcre2Pattern();
  Pcre2Pattern(const Pcre2Pattern&) = delete;
  Pcre2Pattern& operator=(const Pcre2Pattern&) = delete;
  // The first match in `subject` (valid UTF-8) at or after byte `from`: sets [begin, end) and
  // returns true, or returns false where there is none.
  bool find(std::string_view subject, size_t from, size_t& begin, size_t& end) const;

 private:
  void* code_;  // pcre2_code_8
  bool jit_;
  std::string pattern_;
};

}  // namespace tetra::data::tok
