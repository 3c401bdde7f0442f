// Checkpoint I/O: the save and load of a checkpoint of over 1 GB (a 104M-parameter
// model and its AdamW moments) as xmod does it now (XXH3 computed while each file
// is written, verified in 1 MiB blocks on load) vs as it did before (the file
// written, then read whole into memory and hashed with FNV-1a; the same again on
// every load), in alternating rounds, with the median of the pairwise ratios
// (bench/paired_ratio.h). Also the two hashes alone over one buffer in memory.
// The files go to --dir (default: a folder under /tmp), which must hold 2.5 GB.
// Usage: checkpoint_bench [--dir DIR] [--rounds N]
// Exits 1 when the new save or load is slower than the old one.
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/paired_ratio.h"
#include "common/checksum.h"
#include "common/id.h"
#include "worker/model/model.h"
#include "worker/train/checkpoint.h"

namespace xmod {
namespace {

double Seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The checksum as xmod computed it before: the whole file in memory, FNV-1a.
std::string WholeFileFnv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return HexId(buffer.str());
}

// The save as it was: each file written by LibTorch, then read back and hashed.
void OldSave(const std::string& dir, Decoder& model, torch::optim::Optimizer& optimizer) {
  std::filesystem::create_directories(dir);
  torch::save(model, dir + "/model.pt");
  torch::save(optimizer, dir + "/optimizer.pt");
  nlohmann::json meta;
  for (const char* file : {"model.pt", "optimizer.pt"}) {
    meta["checksums"][file] = WholeFileFnv(dir + "/" + file);
  }
  std::ofstream(dir + "/meta.json") << meta.dump();
}

// The load as it was: each file read whole and hashed, then loaded.
void OldLoad(const std::string& dir, Decoder& model, torch::optim::Optimizer& optimizer) {
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir + "/meta.json"));
  for (const char* file : {"model.pt", "optimizer.pt"}) {
    if (WholeFileFnv(dir + "/" + file) != meta["checksums"][file]) std::abort();
  }
  torch::load(model, dir + "/model.pt");
  torch::load(optimizer, dir + "/optimizer.pt");
}

int Main(int argc, char** argv) {
  std::string dir = "/tmp/xmod-checkpoint-bench-" + std::to_string(::getpid());
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  torch::set_num_threads(2);

  // The hashes alone, 256 MiB in memory, alternating.
  {
    std::string bytes(size_t{256} << 20, '\0');
    for (size_t i = 0; i < bytes.size(); i += 8) bytes[i] = static_cast<char>(i * 2654435761u);
    std::vector<double> fnv, xxh;
    uint64_t sink = 0;
    for (int r = 0; r < 5; ++r) {
      fnv.push_back(Seconds([&] { sink ^= Fnv1a64(bytes); }));
      xxh.push_back(Seconds([&] {
        StreamChecksum sum;
        sum.Update(bytes);
        sink ^= sum.Digest();
      }));
    }
    const double gb = static_cast<double>(bytes.size()) / 1e9;
    std::printf("hash, 256 MiB in memory: FNV-1a %.2f GB/s, XXH3 %.2f GB/s; XXH3 / FNV time %s%s\n",
                gb / bench::Median(fnv), gb / bench::Median(xxh),
                bench::Paired(xxh, fnv).Text().c_str(), sink == 42 ? " " : "");
  }

  torch::manual_seed(1);
  Decoder model(DecoderOptions(256, 1024, 16, 8, DefaultDff(1024), 256));
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-4));
  // One step, so that the optimizer holds both moments of every parameter.
  for (auto& p : model->parameters()) p.mutable_grad() = torch::randn_like(p);
  optimizer.step();
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();

  std::vector<double> new_save, old_save, new_load, old_load;
  double bytes = 0;
  for (int r = 0; r < rounds; ++r) {
    std::filesystem::remove_all(dir);
    const std::string run = dir + "/new";
    new_save.push_back(Seconds([&] {
      if (!SaveCheckpoint(run, "bench", 1, model, optimizer).ok()) std::abort();
    }));
    const std::string old_dir = dir + "/old/step_00000001";
    old_save.push_back(Seconds([&] { OldSave(old_dir, model, optimizer); }));
    bytes = static_cast<double>(std::filesystem::file_size(old_dir + "/model.pt") +
                                std::filesystem::file_size(old_dir + "/optimizer.pt"));
    new_load.push_back(Seconds([&] {
      if (!LoadLatestCheckpoint(run, "bench", model, optimizer).ok()) std::abort();
    }));
    old_load.push_back(Seconds([&] { OldLoad(old_dir, model, optimizer); }));
  }
  std::filesystem::remove_all(dir);
  const bench::PairedRatio save = bench::Paired(new_save, old_save);
  const bench::PairedRatio load = bench::Paired(new_load, old_load);
  std::printf("checkpoint of %.2f GB (%lld parameters and AdamW moments):\n", bytes / 1e9,
              static_cast<long long>(params));
  std::printf("  save: new %.2f s, old %.2f s (medians); new / old %s\n", bench::Median(new_save),
              bench::Median(old_save), save.Text().c_str());
  std::printf("  load: new %.2f s, old %.2f s (medians); new / old %s\n", bench::Median(new_load),
              bench::Median(old_load), load.Text().c_str());
  return save.median <= 1.0 && load.median <= 1.0 ? 0 : 1;
}

}  // namespace
}  // namespace xmod

int main(int argc, char** argv) { return xmod::Main(argc, argv); }
