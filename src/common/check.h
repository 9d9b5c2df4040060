// Throwing checks of the library. Messages are for users (docs/numerics.md §9): the argument, the
// rule and the value — no source paths, no internal expressions. The entry point a check runs
// under puts its own name in front (with_op), so every message names the op exactly once.
#pragma once

#include <sstream>
#include <string>

#include "mxq/mxq.h"

namespace mxq::detail {

template <typename... Args>
[[noreturn]] void fail(Error::Kind kind, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw Error(kind, "", os.str());
}

// Runs an entry point's body; an Error thrown without an op name gets `op` in front.
template <typename F>
decltype(auto) with_op(const char* op, F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    if (e.what() != e.message()) throw;  // already named
    throw Error(e.kind(), op, e.message());
  }
}

}  // namespace mxq::detail

// MXQ_CHECK(cond, "message parts", value, ...): a bad argument (Error::Kind::kInvalidArgument).
#define MXQ_CHECK(cond, ...)                                                             \
  do {                                                                                   \
    if (!(cond)) ::mxq::detail::fail(::mxq::Error::Kind::kInvalidArgument, __VA_ARGS__); \
  } while (0)

// MXQ_CHECK_SUPPORTED(cond, ...): a missing capability of this build or device (kUnsupported).
#define MXQ_CHECK_SUPPORTED(cond, ...)                                               \
  do {                                                                               \
    if (!(cond)) ::mxq::detail::fail(::mxq::Error::Kind::kUnsupported, __VA_ARGS__); \
  } while (0)

// MXQ_CHECK_CUDA(call): the CUDA error's name and text (kCuda). Only for files that include the
// CUDA runtime (the macro names cudaGetErrorName).
#define MXQ_CHECK_CUDA(call)                                                                    \
  do {                                                                                          \
    const cudaError_t mxq_err_ = (call);                                                        \
    if (mxq_err_ != cudaSuccess)                                                                \
      ::mxq::detail::fail(::mxq::Error::Kind::kCuda, "CUDA error ", cudaGetErrorName(mxq_err_), \
                          ": ", cudaGetErrorString(mxq_err_));                                  \
  } while (0)
