// mxq: the command-line tool. Subcommands:
//   mxq demo     quantize a random tensor, check GPU bytes against the CPU reference, show values
//                and times
//   mxq bench    the benchmark (CUDA builds only), JSON under benchmarks/results/
//   mxq info     build facts and the visible devices
//   mxq version  the version (also `mxq --version`)
//
// Errors: every message goes to stderr as one line starting "mxq <subcommand>: " (or "mxq: " before
// a subcommand is known), exit code 1; a subcommand this build or machine cannot run exits 2.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <new>

#include "bench.h"
#include "common.h"
#include "demo.h"
#include "mxq/mxq.h"
#if defined(MXQ_WITH_CUDA)
#include "gpu.h"
#endif

namespace mxq::tools {
namespace {

// CLI11 validator for "MxK": its message becomes "--shape: <why>".
const CLI::Validator kShapeValidator(
    [](std::string& text) {
      try {
        parse_shape(text);
        return std::string();
      } catch (const std::invalid_argument& e) {
        return std::string(e.what());
      }
    },
    "MxK", "shape");

const CLI::Validator kRuleValidator = CLI::IsMember({"rceil", "floor"});
const CLI::Validator kDtypeValidator = CLI::IsMember({"bf16", "fp16", "fp32"});

DType dtype_from(const std::string& name) {
  const auto t = parse_dtype(name);
  if (!t) throw ToolError("--dtype: expected one of " + std::string(kDtypeNames) + ", got " + name);
  return *t;
}

// The seed is taken as text and parsed by parse_seed: a uint64_t option would accept "-1" and wrap
// it to 18446744073709551615 without a word.
CLI::Option* add_seed(CLI::App* app, std::string& seed, const char* help) {
  return app->add_option("--seed", seed, help)
      ->check(CLI::Validator(
          [](std::string& text) {
            try {
              parse_seed(text);
              return std::string();
            } catch (const std::invalid_argument& e) {
              return std::string(e.what());
            }
          },
          "UINT64", "seed"))
      ->capture_default_str();
}

// CLI11 alone reads whole numbers with C prefixes ("010" is 8, "0x10" is 16; --shape and --seed are
// decimal only) and calls "3.0" out of range. This takes decimal digits only, says which rule
// failed, and hands the option the value rewritten as plain decimal; so it goes in with transform()
// (check() would discard the rewrite and leave "010" to CLI11's octal).
CLI::Validator whole_number(int min, int max) {
  const std::string range = std::to_string(min) + " - " + std::to_string(max);
  return CLI::Validator(
      [min, max](std::string& text) {
        const bool negative = !text.empty() && text[0] == '-';
        const std::string digits = text.substr(negative ? 1 : 0);
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
          return "expected a whole number, got " + text;
        }
        // Saturates past any int, so no length of input overflows.
        constexpr int64_t kCap = int64_t(1) << 32;
        int64_t value = 0;
        for (char c : digits) value = std::min(value * 10 + (c - '0'), kCap);
        if (negative) value = -value;
        if (value < min || value > max) {
          return "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                 text;
        }
        text = std::to_string(value);
        return std::string();
      },
      "INT in [" + range + "]", "whole number");
}

std::string join_commas(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ",") + item;
  return text;
}

// "a,b,,c" as {"a", "b", "", "c"}: empty entries kept, for comma_list to refuse.
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t end = text.find(',', start);
    items.push_back(text.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) return items;
    start = end + 1;
  }
}

// CLI11's own list splitting (delimiter) drops empty entries without a word: "--ops fused," ran
// fused alone, "--shapes 64x64,,128x128" two shapes. So a list option takes each value whole, and
// this validator checks every entry with `entry` (rewriting it as `entry` does: whole_number) and
// refuses empty ones; the values are split after parsing.
CLI::Validator comma_list(CLI::Validator entry) {
  return CLI::Validator(
      [entry](std::string& text) {
        if (text.empty()) return std::string("expected a comma-separated list, got nothing");
        std::vector<std::string> items = split_commas(text);
        for (std::string& item : items) {
          if (item.empty()) return "empty entry in the list \"" + text + "\"";
          const std::string why = entry(item);
          if (!why.empty()) return why;
        }
        text = join_commas(items);
        return std::string();
      },
      entry.get_description() + "[,...]", "comma list");
}

constexpr const char* kExitCodes =
    "Exit codes: 0 ok, 1 a failed check or an error (one line on stderr), 2 unavailable in this "
    "build or on this machine.";

struct Args {
  DemoOptions demo;
  std::string demo_shape = demo.shape.str();
  std::string demo_seed = std::to_string(demo.seed);
  std::string demo_dtype = to_string(demo.dtype);
  BenchOptions bench;
  std::vector<std::string> bench_shapes;
  std::vector<std::string> bench_ops;
  std::vector<std::string> bench_sets;
  std::vector<std::string> bench_groups;
  std::string bench_seed = std::to_string(bench.seed);
  std::string bench_dtype = to_string(bench.dtype);
};

void add_demo(CLI::App& app, Args& a) {
  DemoOptions& o = a.demo;
  CLI::App* demo = app.add_subcommand(
      "demo",
      "Quantize a random tensor (bf16, fp16 or fp32, with a few special values) on both axes; "
      "check the fused and composed GPU outputs byte-exact against the CPU reference");
  demo->footer(
      "M and K are multiples of 32 on every path. With a usable GPU the fused and composed GPU "
      "paths run and are checked against the CPU reference; with --cpu, or on a machine without a "
      "usable GPU (said in the output), only the CPU reference runs. Large inputs report each "
      "step's time on stderr.\n" +
      std::string(kExitCodes));
  demo->add_option("--shape", a.demo_shape,
                   "Input shape MxK: multiples of 32, each at most 2^31-1, and the buffers must "
                   "fit in memory")
      ->check(kShapeValidator)
      ->capture_default_str();
  demo->add_option("--dtype", a.demo_dtype,
                   "Input element type: bf16, fp16 or fp32 (random values of that type plus NaN, "
                   "+-Inf, -0, the smallest subnormal and the largest finite value)")
      ->check(kDtypeValidator)
      ->capture_default_str();
  demo->add_option("--rule", o.rule, "Scale rounding rule")
      ->check(kRuleValidator)
      ->capture_default_str();
  demo->add_option("--groups", o.groups,
                   "Grouped (MoE) mode with G random groups whose sizes are multiples of 32 rows, "
                   "so G is at most M/32 (more is refused). When G >= 2 one group is left empty "
                   "on purpose (legal: an expert with no tokens), and when M >= 64 rows past the "
                   "last group form an uncovered tail. 0 = dense")
      ->transform(whole_number(0, kMaxGroups))
      ->capture_default_str();
  add_seed(demo, a.demo_seed, "Random seed of the input and the groups (0 to 2^64-1)");
  demo->add_option("--repeats", o.repeats, "Timed GPU runs per path (median shown)")
      ->transform(whole_number(1, 1000))
      ->capture_default_str();
  demo->add_flag("--cpu", o.cpu_only,
                 "Reference only: run the CPU reference alone, even when a GPU is present");
}

void add_bench(CLI::App& app, Args& a) {
  BenchOptions& o = a.bench;
  CLI::App* bench =
      app.add_subcommand("bench", "Time every op under CUDA-graph replay against a copy roof");
  bench->footer(
      "Case sets: main (--shapes, dense and random groups, every activation op, and beside fused "
      "on dense bf16 the probe, the fused kernel's data movement without the math, and copy, x's "
      "bytes by a plain copy kernel); ragged (8160x2880 next to 8192x3072, 32736x5120 next to "
      "32768x5120); grouped (32768x7168: random G=8, G=64 and G=256, even and 90%-skewed G=8, "
      "dense); dtypes (32768x7168 bf16/fp16/fp32: fused, rowwise, colwise); weights "
      "(mxq::quantize_weight, 4 expert shapes, both scalings). The default runs every set; "
      "--shapes alone runs main only; --quick runs main (two shapes, G=8) and the first ragged "
      "pair.\n" +
      std::string(kExitCodes));
  std::vector<std::string> set_names;
  for (BenchSet s : kAllSets) set_names.push_back(set_name(s));
  bench->add_option("--sets", a.bench_sets, "Comma-separated case sets: " + join_commas(set_names))
      ->transform(comma_list(CLI::IsMember(set_names)));
  bench
      ->add_option("--shapes", a.bench_shapes,
                   "The main set's comma-separated MxK shapes, multiples of 32, M*K at most "
                   "2^56 (default: "
                   "8192x2048,8192x7168,32768x2048,32768x7168,131072x2048,131072x7168,512x4096)")
      ->transform(comma_list(kShapeValidator));
  std::vector<std::string> names;
  for (Op op : kAllOps) names.push_back(op_name(op));
  bench
      ->add_option("--ops", a.bench_ops,
                   "Comma-separated ops: " + join_commas(names) +
                       " (default all; probe and copy run in the main set only, dense, bf16)")
      ->transform(comma_list(CLI::IsMember(names)));
  std::vector<std::string> default_groups;
  for (int g : o.groups) default_groups.push_back(std::to_string(g));
  bench
      ->add_option("--groups", a.bench_groups,
                   "The main set's comma-separated group counts (random 32-multiple sizes; dense "
                   "always runs)")
      ->transform(comma_list(whole_number(1, kMaxGroups)))
      ->default_str(join_commas(default_groups));
  bench->add_flag("--no-dense", o.no_dense, "Skip the dense runs of the main and grouped sets");
  bench
      ->add_option(
          "--dtype", a.bench_dtype,
          "Input type of the main, ragged and grouped sets (the dtypes set runs all three)")
      ->check(kDtypeValidator)
      ->capture_default_str();
  bench
      ->add_option("--replays", o.replays,
                   "Timed graph replays per case (median; results want >= 20)")
      ->transform(whole_number(1, 100000))
      ->capture_default_str();
  bench->add_option("--warmup", o.warmup, "Untimed graph replays before timing")
      ->transform(whole_number(0, 1000))
      ->capture_default_str();
  bench->add_option(
      "--json", o.json_path,
      "Results file, checked writable before the first case (default "
      "benchmarks/results/<gpu>_<date>.json, relative to the working directory; '-' for none)");
  bench->add_flag("--quick", o.quick,
                  "Main set on two shapes (8192x2048, 32768x7168) with G=8, and the first ragged "
                  "pair, unless --shapes, --groups or --sets say otherwise");
  bench->add_flag("--list", o.list,
                  "Print the cases the other options select (set, op, shape, dtype, groups, bytes "
                  "moved) and exit; needs no GPU");
  bench->add_flag(
      "!--no-verify", o.verify,
      "Skip the on-device checks (fused == composed; copy == x; weights: two runs agree)");
  bench->add_option("--rule", o.rule, "Scale rounding rule")
      ->check(kRuleValidator)
      ->capture_default_str();
  bench
      ->add_option("--tile-rows", o.tile_rows,
                   "Tile height of the 16-bit quantize kernels: 0 lets each launch choose (64 when "
                   "the 64-row tiles fit one wave of resident CTAs, else 128), 64 or 128 forces it "
                   "(mxq::bench::force_tile_rows)")
      ->transform(whole_number(0, 128).description(""))  // the help shows the set below
      ->check(CLI::IsMember({0, 64, 128}))
      ->capture_default_str();
  add_seed(bench, a.bench_seed, "Random seed of the inputs and the groups (0 to 2^64-1)");
}

int run_info() {
  std::cout << build_info() << "\n";
#if defined(MXQ_WITH_CUDA)
  const int count = device_count();
  std::cout << count
            << " CUDA device(s) visible; mxq kernels usable: " << (gpu_available() ? "yes" : "no")
            << "\n";
  if (count > 0) {
    const DeviceInfo d = query_device();
    std::cout << "current device " << d.index << ": " << d.name << ", sm_" << d.cc_major
              << d.cc_minor << ", " << d.sm_count << " SMs, L2 " << format_bytes(double(d.l2_bytes))
              << ", " << format_bytes(double(d.memory_bytes)) << ", driver " << d.driver_text()
              << ", runtime " << d.runtime_text() << "\n";
  }
#else
  std::cout
      << "this build has no CUDA: `mxq demo` runs the CPU reference, `mxq bench` is unavailable\n";
#endif
  return kExitOk;
}

int run_bench_command(BenchOptions o, const Args& a) {
#if defined(MXQ_WITH_CUDA)
  const bool groups_given = !a.bench_groups.empty();  // comma_list refuses an empty value
  // The entries of the list options' values (each checked by comma_list).
  const auto entries = [](const std::vector<std::string>& lists) {
    std::vector<std::string> out;
    for (const std::string& list : lists) {
      for (std::string& item : split_commas(list)) out.push_back(std::move(item));
    }
    return out;
  };
  for (const auto& s : entries(a.bench_shapes)) o.shapes.push_back(parse_shape(s));
  for (const auto& name : entries(a.bench_ops)) o.ops.push_back(*parse_op(name));
  if (groups_given) {
    o.groups.clear();
    for (const auto& g : entries(a.bench_groups)) o.groups.push_back(std::stoi(g));
  }
  for (const auto& name : entries(a.bench_sets)) {
    const BenchSet s = *parse_set(name);
    if (std::find(o.sets.begin(), o.sets.end(), s) == o.sets.end()) o.sets.push_back(s);
  }
  o.dtype = dtype_from(a.bench_dtype);
  if (o.quick && !groups_given) o.groups = {8};
  return run_bench(o);
#else
  (void)o, (void)a;
  throw ToolError(
      "this build has no CUDA (nvcc was not found at configure time); rebuild on a machine with "
      "the CUDA toolkit. `mxq demo` runs the CPU reference.",
      kExitUnavailable);
#endif
}

// The subcommand named on the command line ("demo"), or "" when none is. Taken from argv rather
// than from CLI11's state, which is incomplete when parsing failed part-way.
std::string named_subcommand(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (sub->get_name() == arg) return arg;
    }
    break;
  }
  return "";
}

// Why parsing failed when no subcommand was named. CLI11 then says only "A subcommand is
// required", even for a misspelt subcommand or an unknown option. The first word is the culprit
// (a valid --help or --version would have succeeded; a malformed one keeps CLI11's message).
std::string top_level_error(const CLI::App& app, const std::string& word,
                            const std::string& cli11_message) {
  if (word.empty() || word[0] != '-') {
    std::string names;
    const auto subs = app.get_subcommands({});
    for (size_t i = 0; i < subs.size(); ++i) {
      names += (i == 0 ? "" : i + 1 == subs.size() ? " or " : ", ") + subs[i]->get_name();
    }
    return "unknown subcommand \"" + word + "\": expected " + names;
  }
  if (word.rfind("--version", 0) == 0 || word == "-h" || word.rfind("--help", 0) == 0) {
    return cli11_message;
  }
  return "unknown option \"" + word + "\"";
}

// Runs the chosen subcommand; every exception becomes one message and an exit code.
int dispatch(CLI::App& app, Args& a, const std::string& prefix) {
  try {
    if (app.got_subcommand("demo")) {
      a.demo.shape = parse_shape(a.demo_shape);
      a.demo.seed = parse_seed(a.demo_seed);
      a.demo.dtype = dtype_from(a.demo_dtype);
      return run_demo(a.demo);
    }
    if (app.got_subcommand("bench")) {
      a.bench.seed = parse_seed(a.bench_seed);
      return run_bench_command(a.bench, a);
    }
    if (app.got_subcommand("version")) {
      std::cout << "mxq " << version() << "\n";
      return kExitOk;
    }
    return run_info();
  } catch (const ToolError& e) {
    std::cerr << prefix << e.what() << "\n";
    return e.exit_code();
  } catch (const Error& e) {
    // The library's own message ("mxq::quantize: M must be ..."); a build without CUDA or a device
    // without kernels is unavailable rather than failed.
    std::cerr << prefix << e.what() << "\n";
    return e.kind() == Error::Kind::kUnsupported ? kExitUnavailable : kExitFailure;
  } catch (const std::bad_alloc&) {
    std::cerr << prefix << "out of host memory; use a smaller shape\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << prefix << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace
}  // namespace mxq::tools

int main(int argc, char** argv) {
  using namespace mxq::tools;
  CLI::App app{
      "mxq: MXFP8 (e4m3 + E8M0, 32-element blocks) quantization of bf16, fp16 and fp32 tensors"};
  app.require_subcommand(1);
  app.footer(kExitCodes);
  app.set_version_flag("--version", std::string("mxq ") + mxq::version(), "Print the version");

  Args args;
  add_demo(app, args);
  add_bench(app, args);
  app.add_subcommand("info", "Print build facts and the visible CUDA devices");
  app.add_subcommand("version", "Print the version");

  // Every error message starts with this, once: "mxq demo: ", or "mxq: " before a subcommand.
  const std::string sub = named_subcommand(app, argc, argv);
  const std::string command = sub.empty() ? "mxq" : "mxq " + sub;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here too, with exit code 0: CLI11 prints those itself.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    const std::string why =
        sub.empty() && argc > 1 ? top_level_error(app, argv[1], e.what()) : std::string(e.what());
    std::cerr << command << ": " << why << " (see `" << command << " --help`)\n";
    return kExitFailure;
  }
  return dispatch(app, args, command + ": ");
}
