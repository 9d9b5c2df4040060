// Throwing checks for the library: file:line, the failed expression and the offending values.
#pragma once

#include <sstream>
#include <string>

#include "mxq/mxq.h"

namespace mxq::detail {

template <typename... Args>
[[noreturn]] void fail(const char* file, int line, const char* expr, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  if (expr != nullptr && expr[0] != '\0') os << " [" << expr << "]";
  os << " (" << file << ":" << line << ")";
  throw Error(os.str());
}

}  // namespace mxq::detail

// MXQ_CHECK(cond, "message parts", value, ...): throws mxq::Error with the message when cond is false.
#define MXQ_CHECK(cond, ...)                                          \
  do {                                                                \
    if (!(cond)) ::mxq::detail::fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)
