// Shared helpers of the C++ test suites: input generators, poison, and raw-byte comparison that
// reports the mismatch count, the first coordinate, both values and both bit patterns.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "mxq/mxq.h"

namespace mxq::test {

constexpr uint8_t kPoison = 0xA5;

// Input families (docs/numerics.md §4 blocks, normal, uniform, wide dynamic range, arange).
enum class Dist { kNormal, kUniform, kWide, kArange, kSpecial };
inline const char* dist_name(Dist d) {
  switch (d) {
    case Dist::kNormal:
      return "normal";
    case Dist::kUniform:
      return "uniform";
    case Dist::kWide:
      return "wide";
    case Dist::kArange:
      return "arange";
    case Dist::kSpecial:
      return "special";
  }
  return "?";
}

// Readable test parameters in test names and CTest listings (instead of raw bytes).
inline void PrintTo(Dist d, std::ostream* os) { *os << dist_name(d); }

inline uint16_t bf16_rn(float f) { return bf16_from_f32(f); }

// fp32 values as the raw bytes of an input of `dtype` (bf16 and fp16 rounded to nearest even).
inline std::vector<uint8_t> encode_as(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> out(v.size() * static_cast<size_t>(dtype_bytes(dtype)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kFloat32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBFloat16 ? bf16_from_f32(v[i]) : f16_from_f32(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// The docs/numerics.md §4 special blocks as 32 bf16 values each (bf16 max 0x7F7F, smallest
// subnormal 0x0001, ...).
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
  return {fill(0x0000),      fill(0x0080),        ones_plus(0x7F80),   ones_plus(0x7FC0),
          fill(0x7FC0),      alternating(0x43E0), alternating(0x7F7F), alternating(0x0001),
          ones_plus(0x0001), ones_plus(0x8001),   ones_plus(0x7F7F),   alternating(0x43F0),
          fill(0x4060),      fill(0x4400),        ones_plus(0xFF80),   fill(0x8000),
          fill(0x0460),      fill(0x0461),        fill(0x045F)};
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
    case Dist::kSpecial: {
      // random normal with the docs/numerics.md §4 blocks planted along rows and columns
      for (auto& v : x) v = bf16_rn(normal(rng));
      const auto blocks = special_blocks();
      std::uniform_int_distribution<int64_t> row_block(0, rows / kBlock - 1),
          col_block(0, cols / kBlock - 1);
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
inline ::testing::AssertionResult bytes_equal(const std::vector<uint8_t>& got,
                                              const std::vector<uint8_t>& want, int64_t cols,
                                              const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != " << want.size();
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
  os << what << ": " << mismatches << " of " << got.size() << " bytes differ; first at ["
     << first / cols << ", " << first % cols << "]: got 0x" << std::hex
     << int(got[static_cast<size_t>(first)]) << ", want 0x"
     << int(want[static_cast<size_t>(first)]);
  return ::testing::AssertionFailure() << os.str();
}

// ---- expected scale layouts, built the way torchao builds them, independently of layout.h ----

// torchao's to_blocked on a row-major S (rows, cols): pad to (128*nr, 4*nc), then view(nr, 128, nc,
// 4).permute(0, 2, 1, 3).reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16):
// row i of a 128x4 block is (u, v) = (i/32, i%32) after the reshape and lands at (v, u) after the
// transpose.
template <typename T>
std::vector<T> to_blocked(const std::vector<T>& s, int64_t rows, int64_t cols) {
  const int64_t nr = (rows + 127) / 128, nc = (cols + 3) / 4;
  std::vector<T> out(static_cast<size_t>(nr * nc * 512), T(0));
  for (int64_t br = 0; br < nr; ++br) {
    for (int64_t bc = 0; bc < nc; ++bc) {
      for (int64_t i = 0; i < 128; ++i) {
        for (int64_t j = 0; j < 4; ++j) {
          const int64_t r = br * 128 + i, c = bc * 4 + j, u = i / 32, v = i % 32;
          const T value = r < rows && c < cols ? s[static_cast<size_t>(r * cols + c)] : T(0);
          out[static_cast<size_t>((br * nc + bc) * 512 + v * 16 + u * 4 + j)] = value;  // (v, u, j)
        }
      }
    }
  }
  return out;
}

// torchao's K-groups rearrangement of a plain S_col (K, M/32): each group's column slice
// [offs[g-1]/32, offs[g]/32) blocked on its own, the blocks concatenated, the rest of the
// (roundup(K,128), M/32 + 4G) allocation zero.
inline std::vector<uint8_t> to_kgroups(const std::vector<uint8_t>& s_col_plain, int64_t M,
                                       int64_t K, const std::vector<int32_t>& offs) {
  const int64_t scale_cols = M / 32;
  std::vector<uint8_t> out(
      static_cast<size_t>((K + 127) / 128 * 128 * (scale_cols + 4 * int64_t(offs.size()))), 0);
  size_t pos = 0;
  int64_t begin = 0;
  for (const int32_t end_token : offs) {
    const int64_t end = end_token / 32;
    std::vector<uint8_t> slice;
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t c = begin; c < end; ++c) {
        slice.push_back(s_col_plain[static_cast<size_t>(k * scale_cols + c)]);
      }
    }
    const std::vector<uint8_t> blocked = to_blocked(slice, K, end - begin);
    std::copy(blocked.begin(), blocked.end(), out.begin() + static_cast<std::ptrdiff_t>(pos));
    pos += blocked.size();
    begin = end;
  }
  return out;
}

// The M-groups rearrangement of a plain S_row (M, K/32), written the same way: each segment (group
// g = rows [offs[g-1], offs[g]), then the uncovered tail [offs[G-1], M)) blocked on its own, the
// blocks concatenated, the rest of the (roundup(M,128) + 128G, roundup(K/32,4)) allocation zero.
inline std::vector<uint8_t> to_mgroups(const std::vector<uint8_t>& s_row_plain, int64_t M,
                                       int64_t K, const std::vector<int32_t>& offs) {
  const int64_t scale_cols = K / 32;
  const int64_t padded_cols = (scale_cols + 3) / 4 * 4;
  std::vector<uint8_t> out(
      static_cast<size_t>(((M + 127) / 128 * 128 + 128 * int64_t(offs.size())) * padded_cols), 0);
  std::vector<int64_t> ends(offs.begin(), offs.end());
  ends.push_back(M);  // the tail
  size_t pos = 0;
  int64_t begin = 0;
  for (const int64_t end : ends) {
    const std::vector<uint8_t> slice(s_row_plain.begin() + begin * scale_cols,
                                     s_row_plain.begin() + end * scale_cols);
    const std::vector<uint8_t> blocked = to_blocked(slice, end - begin, scale_cols);
    std::copy(blocked.begin(), blocked.end(), out.begin() + static_cast<std::ptrdiff_t>(pos));
    pos += blocked.size();
    begin = end;
  }
  return out;
}

// The colwise dequantize layouts the tests use: K-groups when offs is given, else blocked. Call
// after the last edit of offs.
inline void set_colwise_dequant_layout(DequantizeParams& p) {
  p.layout = p.offs != nullptr ? ScaleLayout::kKGroups : ScaleLayout::kBlocked;
}

// `text` as a regular expression that matches exactly it.
inline std::string exact(const std::string& text) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(text, special, R"(\$&)");
}

// Runs f; succeeds when it throws mxq::Error of kind kInvalidArgument whose what() is op + ": " +
// message(), names the op once, and whose message() matches `message` (a regular expression)
// whole, with no source location or internal expression in it.
inline ::testing::AssertionResult throws_error(const std::function<void()>& f,
                                               const std::string& op, const std::string& message) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (e.kind() != Error::Kind::kInvalidArgument) {
      return ::testing::AssertionFailure() << "kind " << int(e.kind()) << ": " << what;
    }
    if (what != op + ": " + e.message() || e.message().find("mxq") != std::string::npos) {
      return ::testing::AssertionFailure()
             << "what() \"" << what << "\" is not \"" << op << ": \" + a message without an op";
    }
    if (!std::regex_match(e.message(), std::regex(message))) {
      return ::testing::AssertionFailure()
             << "message \"" << e.message() << "\" does not match \"" << message << "\"";
    }
    for (const char* bad : {".cpp:", ".h:", ".cu:", "==", "!=", "&&", "||", "->", "p.", "MXQ_"}) {
      if (what.find(bad) != std::string::npos) {
        return ::testing::AssertionFailure() << "\"" << what << "\" contains \"" << bad << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-mxq exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace mxq::test

namespace mxq {
inline void PrintTo(ScalingMode mode, std::ostream* os) { *os << to_string(mode); }
}  // namespace mxq
