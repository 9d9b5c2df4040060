// Host-side fork-join over row ranges: the CPU reference's threads (and the GPU tests' input generator).
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace mxq::detail {

// Calls body(begin, end) on disjoint ranges covering [0, n), one range per hardware thread.
template <typename Body>
void parallel_for(int64_t n, const Body& body) {
  const int64_t threads =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(n, 1));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    pool.emplace_back([&body, n, threads, t] { body(n * t / threads, n * (t + 1) / threads); });
  }
  body(0, n / threads);
  for (auto& th : pool) th.join();
}

}  // namespace mxq::detail
