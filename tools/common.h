// Pieces shared by the mxq command-line tool's subcommands: shapes, random inputs, MoE group
// offsets, statistics and plain-text tables. Host-only; no CUDA headers.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxq/numerics.h"

namespace mxq::tools {

// Exit codes of the tool. Failure: a byte-exact check failed, or an error (mxq::Error, CUDA) was
// raised. Unavailable: the subcommand needs what this build or machine lacks.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUnavailable = 2;

// An error the tool detected itself (a bad option value, a shape the chosen path cannot take, not
// enough memory). main() prints what() after the subcommand's prefix ("mxq demo: "), so messages
// never carry a prefix of their own.
class ToolError : public std::runtime_error {
 public:
  explicit ToolError(const std::string& message, int exit_code = kExitFailure)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// A logical (M, K) input shape, written "MxK" on the command line.
struct MatrixShape {
  int64_t M = 0;
  int64_t K = 0;
  int64_t elements() const { return M * K; }
  std::string str() const { return std::to_string(M) + "x" + std::to_string(K); }
};
// Parses "MxK" (also "M,K"): two runs of decimal digits, each at most mxq::kMaxDim (2^31-1).
// Throws std::invalid_argument with a message for users (no exception from std::stoll escapes, so
// "99999999999999999999x64" is an error message, not an abort).
MatrixShape parse_shape(const std::string& text);

// Parses a seed: a decimal integer in [0, 2^64-1]. A leading '-' is refused rather than wrapped
// (CLI11 would turn "-1" into 18446744073709551615 for a uint64_t option).
uint64_t parse_seed(const std::string& text);

// Bytes of physical memory this process can still allocate without swapping: MemAvailable from
// /proc/meminfo, else the free pages sysconf reports; 0 when unknown.
int64_t available_host_bytes();

// Progress on stderr for steps that can take seconds: "mxq demo: reference ... 3.1 s". Quiet when
// `enabled` is false, so small runs print nothing extra. The line is finished by done() or, if the
// step throws, by the destructor (" failed"), so an error message starts on a fresh line.
class Phase {
 public:
  Phase(bool enabled, const std::string& prefix, const std::string& what);
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;
  void done();

 private:
  bool open_;
  double start_s_;
};

// A small, fast, seedable generator (SplitMix64): the same seed gives the same tensors everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

// Input element types by their command-line names, mxq::to_string(DType): "bf16", "fp16", "fp32".
std::optional<DType> parse_dtype(const std::string& name);
constexpr const char* kDtypeNames = "bf16|fp16|fp32";

// fp32 -> fp16 bits, round to nearest even (subnormals kept, overflow to Inf, NaN to 0x7E00).
uint16_t f16_from_f32(float f);

// Random input of `dtype`, row-major (M, K), as raw element bytes (dtype_bytes(dtype) each; the
// vector's storage is 16-byte aligned). Values: uniform in (-1, 1) times 2^(e_tile + e_row), e_tile
// drawn per 32x32 tile from [-12, 12] and e_row per row from [-4, 0], so that neighbouring blocks of
// both axes get different scale bytes and a row block's scale differs from those of the column
// blocks crossing it. The same fp32 values for every dtype (the same seed), rounded to nearest even
// for bf16 and fp16 (the smallest magnitudes become fp16 subnormals or signed zeros); fp32 keeps
// them exactly. No NaN or Inf: add_specials puts those in.
std::vector<uint8_t> random_input(const MatrixShape& shape, DType dtype, uint64_t seed);

// One special value placed by add_specials.
struct Special {
  const char* name;  // "NaN", "+Inf", "-0", "min subnormal", "max finite", ...
  int64_t index;     // element index m * K + k
};
// Overwrites a few elements of x (random_input's layout) with the specials of its dtype: NaN, +Inf,
// -Inf, -0, the smallest subnormal and the largest finite value (both signs). Each goes into its
// own random element; on a tiny tensor later ones may overwrite earlier ones (only the survivors
// are returned, in index order).
std::vector<Special> add_specials(std::vector<uint8_t>& x, const MatrixShape& shape, DType dtype,
                                  uint64_t seed);

// Element `index` of x (random_input's layout), widened exactly to fp32.
float input_value(const std::vector<uint8_t>& x, DType dtype, int64_t index);

// G cumulative end offsets for grouped (MoE) mode: random group sizes that are multiples of 32
// (kGroupAlign), at least one empty group when G >= 2, and an uncovered tail when M >= 64
// (offs[G-1] < M). docs/numerics.md §6.
std::vector<int32_t> random_group_offsets(int64_t M, int num_groups, uint64_t seed);
// G groups of (nearly) equal size covering all of M: group g ends at roundown((g+1)M/G, 32), the
// last at M. No tail.
std::vector<int32_t> even_group_offsets(int64_t M, int num_groups);
// One group (a random one) holding `share` of M's rows (rounded to a multiple of 32), the other
// G-1 groups random 32-multiples of the rest (some may be empty); covers all of M, no tail.
std::vector<int32_t> skewed_group_offsets(int64_t M, int num_groups, double share, uint64_t seed);
std::string describe_groups(const std::vector<int32_t>& offs, int64_t M);

double median(std::vector<double> values);

// "1.50 GiB", "512 KiB", "37 B".
std::string format_bytes(double bytes);
// Fixed-point with `digits` decimals.
std::string fixed(double value, int digits);

// A plain-text table with aligned columns; numbers read better right-aligned, so every column after
// the first is right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Today's local date, "YYYY-MM-DD", and the current time in ISO 8601.
std::string today();
std::string now_iso8601();
// "NVIDIA H200" -> "nvidia-h200".
std::string slug(const std::string& text);

}  // namespace mxq::tools
