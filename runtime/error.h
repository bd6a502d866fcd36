// Errors: every failure carries what failed, where (file:line), and what to do about it.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tetra {

// The error category decides the process exit code in launch/ (config errors exit 2).
enum class ErrorKind { Internal, Config, Data, Checkpoint, Comm, Device, Usage };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(ErrorKind kind, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace tetra

// TETRA_CHECK(cond, "message", value, ...): internal invariant / argument check.
#define TETRA_CHECK(cond, ...)                                                                    \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::tetra::detail::throw_error(::tetra::ErrorKind::Internal, __FILE__, __LINE__,              \
                                   ::tetra::detail::concat("check failed: " #cond ": ", __VA_ARGS__)); \
  } while (0)

// TETRA_FAIL(kind, "message", ...): a user-facing error of a given kind.
#define TETRA_FAIL(kind, ...) \
  ::tetra::detail::throw_error(::tetra::ErrorKind::kind, __FILE__, __LINE__, ::tetra::detail::concat(__VA_ARGS__))
