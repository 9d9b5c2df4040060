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

// MXQ_CHECK(cond, "message parts", value, ...): throws mxq::Error with the message when cond is
// false.
#define MXQ_CHECK(cond, ...)                                                  \
  do {                                                                        \
    if (!(cond)) ::mxq::detail::fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

// MXQ_CHECK_CUDA(call): throws mxq::Error with the CUDA error's name and text. Only for files that
// include the CUDA runtime (the macro names cudaGetErrorName).
#define MXQ_CHECK_CUDA(call)                                                                 \
  do {                                                                                       \
    const cudaError_t mxq_err_ = (call);                                                     \
    MXQ_CHECK(mxq_err_ == cudaSuccess, "mxq: CUDA error ", cudaGetErrorName(mxq_err_), ": ", \
              cudaGetErrorString(mxq_err_));                                                 \
  } while (0)
