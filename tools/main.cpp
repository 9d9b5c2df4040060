// mxq: the command-line tool. Subcommands:
//   mxq demo   quantize a random tensor, check GPU bytes against the CPU reference, show values
//              and times
//   mxq bench  the SPEC §10 benchmark (CUDA builds only), JSON under benchmarks/results/
//   mxq info   build facts and the visible devices
#include <CLI/CLI.hpp>
#include <iostream>

#include "bench.h"
#include "common.h"
#include "demo.h"
#include "mxq/mxq.h"
#if defined(MXQ_WITH_CUDA)
#include "gpu.h"
#endif

namespace mxq::tools {
namespace {

// CLI11 validator for "MxK".
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

void add_demo(CLI::App& app, DemoOptions& o, std::string& shape) {
  CLI::App* demo = app.add_subcommand("demo",
                                      "Quantize a random bf16 tensor on both axes; check GPU "
                                      "outputs byte-exact against the CPU reference");
  demo->add_option("--shape", shape,
                   "Input shape MxK (multiples of 128 for the GPU, 32 for the CPU)")
      ->check(kShapeValidator)
      ->capture_default_str();
  demo->add_option("--rule", o.rule, "Scale rounding rule")
      ->check(kRuleValidator)
      ->capture_default_str();
  demo->add_option("--groups", o.groups,
                   "Grouped (MoE) mode with G random 128-multiple groups; 0 = dense")
      ->check(CLI::Range(0, kMaxGroups))
      ->capture_default_str();
  demo->add_option("--seed", o.seed, "Random seed of the input and the groups")
      ->capture_default_str();
  demo->add_option("--repeats", o.repeats, "Timed GPU runs per path (median shown)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  demo->add_flag("--cpu", o.cpu_only, "Use the CPU reference only, even when a GPU is present");
}

void add_bench(CLI::App& app, BenchOptions& o, std::vector<std::string>& shapes,
               std::vector<std::string>& ops) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Time every op under CUDA-graph replay against a copy roof (SPEC §10)");
  bench
      ->add_option("--shapes", shapes,
                   "Comma-separated MxK shapes (default: 8192x2048,8192x7168,32768x2048,32768x7168,"
                   "131072x2048,131072x7168,512x4096)")
      ->delimiter(',')
      ->check(kShapeValidator);
  bench
      ->add_option(
          "--ops", ops,
          "Comma-separated ops: rowwise,colwise,composed,fused,swizzle,dequantize (default all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"rowwise", "colwise", "composed", "fused", "swizzle", "dequantize"}));
  bench
      ->add_option("--groups", o.groups,
                   "Comma-separated group counts for the grouped runs (dense always runs)")
      ->delimiter(',')
      ->check(CLI::Range(1, kMaxGroups))
      ->capture_default_str();
  bench->add_flag("--no-dense", o.no_dense, "Skip the dense runs");
  bench
      ->add_option("--replays", o.replays,
                   "Timed graph replays per case (median; SPEC wants >= 20)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  bench->add_option("--warmup", o.warmup, "Untimed graph replays before timing")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  bench->add_option(
      "--json", o.json_path,
      "Results file (default benchmarks/results/<gpu>_<date>.json, relative to the working "
      "directory; '-' for none)");
  bench->add_flag("--quick", o.quick,
                  "Two shapes (8192x2048, 32768x7168) and G=8 only, unless given explicitly");
  bench->add_flag("!--no-verify", o.verify, "Skip the on-device fused == composed byte check");
  bench->add_option("--rule", o.rule, "Scale rounding rule")
      ->check(kRuleValidator)
      ->capture_default_str();
  bench->add_option("--seed", o.seed, "Random seed of the inputs and the groups")
      ->capture_default_str();
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

int run_bench_command(BenchOptions o, const std::vector<std::string>& shapes,
                      const std::vector<std::string>& ops, bool groups_given) {
#if defined(MXQ_WITH_CUDA)
  for (const auto& s : shapes) o.shapes.push_back(parse_shape(s));
  for (const auto& name : ops) o.ops.push_back(*parse_op(name));
  if (o.quick && !groups_given) o.groups = {8};
  return run_bench(o);
#else
  (void)o, (void)shapes, (void)ops, (void)groups_given;
  std::cerr << "mxq bench: this build has no CUDA (nvcc was not found at configure time); "
               "rebuild on a machine with the CUDA toolkit. `mxq demo` runs the CPU reference.\n";
  return kExitUnavailable;
#endif
}

}  // namespace
}  // namespace mxq::tools

int main(int argc, char** argv) {
  using namespace mxq::tools;
  CLI::App app{"mxq: MXFP8 (e4m3 + E8M0, 32-element blocks) quantization of bf16 tensors"};
  app.require_subcommand(1);

  DemoOptions demo;
  std::string demo_shape = demo.shape.str();
  add_demo(app, demo, demo_shape);

  BenchOptions bench;
  std::vector<std::string> bench_shapes;
  std::vector<std::string> bench_ops;
  add_bench(app, bench, bench_shapes, bench_ops);

  app.add_subcommand("info", "Print build facts and the visible CUDA devices");

  CLI11_PARSE(app, argc, argv);
  try {
    if (app.got_subcommand("demo")) {
      demo.shape = parse_shape(demo_shape);
      return run_demo(demo);
    }
    if (app.got_subcommand("bench")) {
      const bool groups_given = app.get_subcommand("bench")->count("--groups") > 0;
      return run_bench_command(bench, bench_shapes, bench_ops, groups_given);
    }
    return run_info();
  } catch (const std::exception& e) {
    std::cerr << "mxq: error: " << e.what() << "\n";
    return kExitFailure;
  }
}
