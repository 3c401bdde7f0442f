// The GPU check's measurements, in one run (bench/gpu_check.sh runs it; see
// docs/gpu-check.md):
//   1. NCCL all-reduce over every local GPU (one process, ncclCommInitAll):
//      time, algorithm and bus bandwidth of a 256 MiB fp32 buffer;
//   2. a dense d = 1024 model's bf16 training step: MFU, the achieved model
//      FLOP/s (training FLOPs per token as docs/metrics.md counts them, × tokens
//      ÷ step time) over the device's dense bf16 peak (--peak-tflops);
//   3. X-MoD (ρ = 0.125, stride 2, same width and depth) vs that dense step:
//      step-time ratio against the FLOP ratio, in interleaved rounds;
//   4. a bf16 training run on the device (the trainer, --curve-steps steps) vs
//      the fp32 run of the same job on the CPU for its first --cpu-steps steps:
//      the largest relative train-loss difference over those steps.
// --small shrinks every shape so that the whole check runs on a CPU in about a
// minute (what the test suite does; part 1 then says there is no GPU). Figures
// go to stdout and, with --json FILE, to a JSON file. Exits 1 when part 4's
// difference exceeds --curve-tolerance or a part fails.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/paired_ratio.h"
#include "bench/stepper.h"
#include "worker/model/precision.h"
#include "worker/train/trainer.h"

#if XMOD_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace xmod {
namespace {

using bench::Paired;
using bench::Seconds;
using bench::Stepper;

struct Options {
  bool small = false;
  int repeats = 7;
  int curve_steps = 200;
  int cpu_steps = 20;
  double peak_tflops = 0;  // 0: MFU not computed
  double curve_tolerance = 0.05;
  int threads = 0;
  std::string json;
};

ModelShape Dense(const Options& o) {
  ModelShape s;
  s.family = Family::kDense;
  s.d_model = o.small ? 128 : 1024;
  s.n_heads = o.small ? 4 : 16;
  s.n_layers = o.small ? 2 : 16;
  s.d_ff = DefaultDff(s.d_model);
  s.vocab_size = o.small ? 256 : 50304;
  s.context = o.small ? 128 : 2048;
  return s;
}

// Part 1.
nlohmann::json AllReduceOnGpus();
nlohmann::json AllReduce() {
  nlohmann::json out = AllReduceOnGpus();
  if (out.contains("skipped")) {
    std::printf("1. NCCL all-reduce: skipped (%s)\n", out["skipped"].get<std::string>().c_str());
  }
  return out;
}

nlohmann::json AllReduceOnGpus() {
  nlohmann::json out;
#if XMOD_HAVE_NCCL
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    out["skipped"] = "no CUDA device";
    return out;
  }
  const int64_t count = int64_t{64} << 20;  // 256 MiB of fp32
  std::vector<int> devices(n);
  for (int i = 0; i < n; ++i) devices[i] = i;
  std::vector<ncclComm_t> comms(n);
  if (ncclCommInitAll(comms.data(), n, devices.data()) != ncclSuccess) {
    out["error"] = "ncclCommInitAll failed";
    return out;
  }
  std::vector<torch::Tensor> buffers;
  for (int i = 0; i < n; ++i) {
    buffers.push_back(torch::ones({count}, torch::dtype(torch::kFloat32).device(torch::kCUDA, i)));
  }
  const auto run = [&] {
    ncclGroupStart();
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(i);
      ncclAllReduce(buffers[i].data_ptr(), buffers[i].data_ptr(), count, ncclFloat, ncclSum,
                    comms[i], nullptr);
    }
    ncclGroupEnd();
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(i);
      cudaDeviceSynchronize();
    }
  };
  for (int w = 0; w < 3; ++w) run();
  std::vector<double> times;
  for (int r = 0; r < 10; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(Seconds(start));
  }
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  const double t = bench::Median(times);
  const double bytes = 4.0 * static_cast<double>(count);
  out["gpus"] = n;
  out["bytes"] = bytes;
  out["seconds"] = t;
  out["algorithm_gb_per_s"] = bytes / t / 1e9;
  // NCCL's bus bandwidth: what each link carries in a ring, 2(n-1)/n of the buffer.
  out["bus_gb_per_s"] = n > 1 ? bytes * 2.0 * (n - 1) / n / t / 1e9 : 0.0;
  std::printf(
      "1. NCCL all-reduce, %d GPU(s), 256 MiB fp32: %.3f ms, algorithm %.1f GB/s, bus %.1f "
      "GB/s%s\n",
      n, t * 1e3, bytes / t / 1e9, n > 1 ? bytes * 2.0 * (n - 1) / n / t / 1e9 : 0.0,
      n == 1 ? " (one GPU: a local operation, no link)" : "");
#else
  out["skipped"] = "built without NCCL";
#endif
  return out;
}

// Parts 2 and 3.
nlohmann::json Steps(const Options& o, const torch::Device& device) {
  const ModelShape dense = Dense(o);
  ModelShape xmod = dense;
  xmod.family = Family::kXmod;
  xmod.stride = 2;
  xmod.capacity = 0.125;
  const int64_t batch = o.small ? 4 : 8;
  const bool bf16 = Bf16Unsupported(device).empty();
  Stepper a(dense, batch, device), b(xmod, batch, device);
  a.bf16 = b.bf16 = bf16;
  const auto times = bench::StepTimes({&a, &b}, o.repeats);
  const double dense_seconds = bench::Median(times[0]);
  const double achieved = a.flops_per_step / dense_seconds;
  const bench::PairedRatio ratio = Paired(times[1], times[0]);
  const double flop_ratio = b.flops_per_step / a.flops_per_step;
  nlohmann::json out;
  out["precision"] = bf16 ? "bf16" : "fp32";
  out["dense_d_model"] = dense.d_model;
  out["dense_layers"] = dense.n_layers;
  out["context"] = dense.context;
  out["batch"] = batch;
  out["dense_step_seconds"] = dense_seconds;
  out["achieved_tflops"] = achieved / 1e12;
  std::printf("2. dense d=%lld, %lld layers, T=%lld, batch %lld, %s: step %.1f ms, %.2f TFLOP/s",
              static_cast<long long>(dense.d_model), static_cast<long long>(dense.n_layers),
              static_cast<long long>(dense.context), static_cast<long long>(batch),
              bf16 ? "bf16" : "fp32", dense_seconds * 1e3, achieved / 1e12);
  if (o.peak_tflops > 0) {
    out["peak_tflops"] = o.peak_tflops;
    out["mfu"] = achieved / (o.peak_tflops * 1e12);
    std::printf(", MFU %.3f of %.0f TFLOP/s", achieved / (o.peak_tflops * 1e12), o.peak_tflops);
  }
  std::printf("\n");
  out["xmod_step_ratio"] = ratio.median;
  out["xmod_step_ratio_low"] = ratio.low;
  out["xmod_step_ratio_high"] = ratio.high;
  out["xmod_flop_ratio"] = flop_ratio;
  std::printf("3. X-MoD rho=0.125 s=2 / dense step time: %s; FLOP ratio %.3f\n",
              ratio.Text().c_str(), flop_ratio);
  return out;
}

JobFile CurveJob(const Options& o, int64_t steps) {
  JobFile job;
  job.id = "gpu-check-curve";
  job.shape.family = Family::kDense;
  job.shape.d_model = o.small ? 64 : 256;
  job.shape.n_heads = 4;
  job.shape.n_layers = o.small ? 2 : 4;
  job.shape.d_ff = DefaultDff(job.shape.d_model);
  job.shape.vocab_size = 256;
  job.shape.context = o.small ? 64 : 256;
  job.routed_tokens = job.shape.context;
  job.steps = steps;
  job.batch_size = 16;
  job.micro_batch_size = 16;
  job.lr = 3e-3;
  job.min_lr = 3e-4;
  job.warmup_steps = 10;
  job.weight_decay = 0.1;
  job.grad_clip = 1.0;
  job.eval_interval = steps;
  job.eval_tokens = 4 * job.shape.context;
  job.checkpoint_interval = steps;
  job.seed = 11;
  job.flops_per_token = TrainFlopsPerToken(job.shape);
  job.synthetic_seed = 3;
  return job;
}

// Part 4: the trainer, bf16 on the device and fp32 on the CPU.
nlohmann::json Curves(const Options& o, const torch::Device& device, bool* ok) {
  nlohmann::json out;
  const std::string dir = "/tmp/xmod_gpu_check_" + std::to_string(::getpid());
  const auto train = [&](const JobFile& job, const std::string& dev,
                         const std::string& name) -> std::vector<double> {
    auto data = OpenJobData(job);
    auto comm = MakeSingleProcessCommunicator();
    TrainerOptions t;
    t.run_dir = dir + "/" + name;
    t.device = dev;
    t.threads = o.threads;
    auto result = Train(job, **data, *comm, t);
    if (!result.ok()) {
      std::printf("4. %s run failed: %s\n", name.c_str(), result.status().ToString().c_str());
      *ok = false;
      return {};
    }
    return result->train_losses;
  };
  JobFile bf16 = CurveJob(o, o.curve_steps);
  bf16.precision = Bf16Unsupported(device).empty() ? "bf16" : "fp32";
  const JobFile fp32 = CurveJob(o, o.cpu_steps);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<double> a = train(bf16, device.str(), "device");
  const double device_seconds = Seconds(start);
  const std::vector<double> b = train(fp32, "cpu", "cpu");
  std::filesystem::remove_all(dir);
  if (a.size() < b.size() || b.empty()) {
    *ok = false;
    return out;
  }
  // The schedules differ after warm-up (the runs have different lengths), so only
  // the steps before either schedule decays much are compared: the first cpu_steps.
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / b[i]);
  out["device_precision"] = bf16.precision;
  out["device_steps"] = a.size();
  out["device_seconds"] = device_seconds;
  out["compared_steps"] = b.size();
  out["largest_relative_difference"] = worst;
  out["first_loss_device"] = a.front();
  out["first_loss_cpu"] = b.front();
  out["last_loss_device"] = a.back();
  out["tolerance"] = o.curve_tolerance;
  std::printf(
      "4. %s on %s for %zu steps (%.1f s; loss %.4f -> %.4f) vs fp32 on the CPU: largest "
      "relative train-loss difference over the first %zu steps %.2e (tolerance %.2g)\n",
      bf16.precision.c_str(), device.str().c_str(), a.size(), device_seconds, a.front(), a.back(),
      b.size(), worst, o.curve_tolerance);
  if (!(worst <= o.curve_tolerance)) *ok = false;
  return out;
}

}  // namespace
}  // namespace xmod

int main(int argc, char** argv) {
  xmod::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpu_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--small") {
      o.small = true;
    } else if (a == "--repeats") {
      o.repeats = std::stoi(next());
    } else if (a == "--curve-steps") {
      o.curve_steps = std::stoi(next());
    } else if (a == "--cpu-steps") {
      o.cpu_steps = std::stoi(next());
    } else if (a == "--peak-tflops") {
      o.peak_tflops = std::stod(next());
    } else if (a == "--curve-tolerance") {
      o.curve_tolerance = std::stod(next());
    } else if (a == "--threads") {
      o.threads = std::stoi(next());
    } else if (a == "--json") {
      o.json = next();
    } else {
      std::fprintf(stderr,
                   "usage: gpu_bench [--small] [--repeats N] [--curve-steps N] [--cpu-steps N] "
                   "[--peak-tflops X] [--curve-tolerance X] [--threads N] [--json FILE]\n");
      return 2;
    }
  }
  if (o.threads > 0) torch::set_num_threads(o.threads);
  const torch::Device device =
      torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  std::printf("gpu_bench on %s, LibTorch %s%s\n", device.str().c_str(), TORCH_VERSION,
              o.small ? " (--small shapes)" : "");
  bool ok = true;
  nlohmann::json report;
  report["device"] = device.str();
  report["libtorch"] = TORCH_VERSION;
  report["small"] = o.small;
  report["all_reduce"] = xmod::AllReduce();
  report["steps"] = xmod::Steps(o, device);
  report["curve"] = xmod::Curves(o, device, &ok);
  report["ok"] = ok;
  if (!o.json.empty()) std::ofstream(o.json) << report.dump(2) << "\n";
  return ok ? 0 : 1;
}
