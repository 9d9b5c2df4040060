// Shared helpers of the C++ test suites: input generators, poison, and raw-byte comparison that reports the
// mismatch count, the first coordinate, both values and both bit patterns.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "mxq/mxq.h"

namespace mxq::test {

constexpr uint8_t kPoison = 0xA5;

// Input families (SPEC §4 blocks, normal, uniform, wide dynamic range, arange).
enum class Dist { kNormal, kUniform, kWide, kArange, kSpecial };
inline const char* dist_name(Dist d) {
  switch (d) {
    case Dist::kNormal: return "normal";
    case Dist::kUniform: return "uniform";
    case Dist::kWide: return "wide";
    case Dist::kArange: return "arange";
    case Dist::kSpecial: return "special";
  }
  return "?";
}

inline uint16_t bf16_rn(float f) { return bf16_from_f32(f); }

// The SPEC §4 special blocks as 32 bf16 values each (bf16 max 0x7F7F, smallest subnormal 0x0001, ...).
inline std::vector<std::vector<uint16_t>> special_blocks() {
  auto fill = [](uint16_t v) { return std::vector<uint16_t>(kBlock, v); };
  auto ones_plus = [](uint16_t first) {
    std::vector<uint16_t> b(kBlock, 0x3F80);
    b[0] = first;
    return b;
  };
  auto alternating = [](uint16_t v) {  // +v, -v, +v, ...
    std::vector<uint16_t> b(kBlock);
    for (int i = 0; i < kBlock; ++i) b[i] = uint16_t(v | (i % 2 ? 0x8000 : 0));
    return b;
  };
  return {fill(0x0000),           fill(0x0080),          ones_plus(0x7F80),     ones_plus(0x7FC0),
          fill(0x7FC0),           alternating(0x43E0),   alternating(0x7F7F),   alternating(0x0001),
          ones_plus(0x0001),      ones_plus(0x8001),     ones_plus(0x7F7F),     alternating(0x43F0),
          fill(0x4060),           fill(0x4400),          ones_plus(0xFF80),     fill(0x8000),
          fill(0x0460),           fill(0x0461),          fill(0x045F)};
}

// Fresh random bf16 values of (rows, cols), row-major. Seeds differ per call site; never all zeros.
inline std::vector<uint16_t> make_input(int64_t rows, int64_t cols, Dist dist, uint64_t seed) {
  std::vector<uint16_t> x(static_cast<size_t>(rows * cols));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::uniform_int_distribution<int> exponent(-140, 120);
  switch (dist) {
    case Dist::kNormal:
      for (auto& v : x) v = bf16_rn(normal(rng));
      break;
    case Dist::kUniform:
      for (auto& v : x) v = bf16_rn(uniform(rng));
      break;
    case Dist::kWide:  // magnitudes from subnormal to near bf16 max, random signs
      for (auto& v : x) v = bf16_rn(std::ldexp(uniform(rng), exponent(rng)));
      break;
    case Dist::kArange:
      for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_rn(static_cast<float>(i % 4099) - 2049.f);
      break;
    case Dist::kSpecial: {  // random normal tensor with SPEC §4 blocks planted along rows and columns
      for (auto& v : x) v = bf16_rn(normal(rng));
      const auto blocks = special_blocks();
      std::uniform_int_distribution<int64_t> row_block(0, rows / kBlock - 1), col_block(0, cols / kBlock - 1);
      std::uniform_int_distribution<int64_t> any_row(0, rows - 1), any_col(0, cols - 1);
      const int64_t plants = std::max<int64_t>(8, rows * cols / 4096);
      for (int64_t i = 0; i < plants; ++i) {
        const auto& b = blocks[static_cast<size_t>(i) % blocks.size()];
        if (i % 2 == 0) {  // along a row: a rowwise block
          const int64_t r = any_row(rng), c0 = col_block(rng) * kBlock;
          for (int j = 0; j < kBlock; ++j) x[static_cast<size_t>(r * cols + c0 + j)] = b[j];
        } else {  // down a column: a colwise block
          const int64_t r0 = row_block(rng) * kBlock, c = any_col(rng);
          for (int j = 0; j < kBlock; ++j) x[static_cast<size_t>((r0 + j) * cols + c)] = b[j];
        }
      }
      break;
    }
  }
  return x;
}

// Raw-byte equality of two (rows, cols) byte matrices with a readable report of the first mismatch.
inline ::testing::AssertionResult bytes_equal(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                              int64_t cols, const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  }
  int64_t mismatches = 0;
  int64_t first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++mismatches;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << what << ": " << mismatches << " of " << got.size() << " bytes differ; first at [" << first / cols
     << ", " << first % cols << "]: got 0x" << std::hex << int(got[static_cast<size_t>(first)]) << ", want 0x"
     << int(want[static_cast<size_t>(first)]);
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace mxq::test
