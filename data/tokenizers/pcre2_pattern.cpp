#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizers/pcre2_pattern.h"

#include <pcre2.h>

#include "runtime/error.h"

namespace tetra::data::tok {
namespace {

// One per thread, shared by every pattern: match data with room for the whole match, and a JIT
// stack that grows to 8 MiB (long runs of one class recurse on it).
struct ThreadScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  ThreadScratch() {
    if (!data || !context || !stack) TETRA_FAIL(Internal, "PCRE2: out of memory for match data");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadScratch& scratch() {
  thread_local ThreadScratch s;
  return s;
}

}  // namespace

Pcre2Pattern::Pcre2Pattern(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    TETRA_FAIL(Data, "tokenizer.json: pattern '", pattern, "' does not compile at offset ", at, ": ",
               reinterpret_cast<const char*>(msg));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // without JIT, pcre2_match interprets
}

Pcre2Pattern::~Pcre2Pattern() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Pcre2Pattern::find(std::string_view subject, size_t from, size_t& begin, size_t& end) const {
  ThreadScratch& s = scratch();
  auto* code = static_cast<const pcre2_code*>(code_);
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = jit_ ? pcre2_jit_match(code, text, subject.size(), from, 0, s.data, s.context)
                      : pcre2_match(code, text, subject.size(), from, PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    TETRA_FAIL(Data, "pattern '", pattern_, "' failed on the text: ", reinterpret_cast<const char*>(msg));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  begin = ov[0];
  end = ov[1];
  return true;
}

}  // namespace tetra::data::tok
