#include "runtime/error.h"

#include <cstring>

namespace tetra::detail {

[[noreturn]] void throw_error(ErrorKind kind, const char* file, int line, const std::string& msg) {
  // Internal errors name the source location; user-facing ones (config, data) speak for themselves.
  if (kind == ErrorKind::Internal || kind == ErrorKind::Device || kind == ErrorKind::Comm) {
    const char* base = std::strrchr(file, '/');
    throw Error(kind, concat(msg, " [", base ? base + 1 : file, ":", line, "]"));
  }
  throw Error(kind, msg);
}

}  // namespace tetra::detail
