// The dense-law fit of the 240 Chinchilla reference points (tests/data, the 5
// highest-loss runs dropped, D = C / 6N), timed three ways side by side in one
// run, alternating rounds:
//   scout+polish  the fitter as shipped: every one of the 5,400 starts gets 10
//                 Levenberg-Marquardt iterations, the 64 best are solved to
//                 convergence;
//   exhaustive    every start solved to convergence (what the search replaces);
//   scipy         bench/fit_scipy.py: SciPy L-BFGS-B from every start (skipped
//                 when that Python has no scipy; Debian's python3-scipy is in
//                 /usr/bin/python3, the default).
// Prints times, objectives and ratios (medians of the pairwise ratios of the
// rounds, with their range: bench/paired_ratio.h); exits 1 when scout+polish
// misses the exhaustive optimum or its median time is over 5 s.
// Run: build/bin/fit_bench [--threads N] [--rounds R] [--python /usr/bin/python3]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/paired_ratio.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/dense_law.h"
#include "orchestrator/fit/fitter.h"
#include "orchestrator/fit/law_csv.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

const std::string kCsv = std::string(XMOD_SOURCE_DIR) + "/tests/data/chinchilla_svg_extracted.csv";

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Main(int argc, char** argv) {
  int threads = 2, rounds = 3;
  std::string python = "/usr/bin/python3";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (flag == "--python") python = argv[i + 1];
  }
  auto loaded = ReadChinchillaReference(kCsv, 5);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  const std::vector<LawPoint> points = *loaded;
  const bool scipy = std::system((python + " -c 'import scipy' >/dev/null 2>&1").c_str()) == 0;
  std::vector<double> t_scout, t_full, t_scipy;
  double o_scout = 0, o_full = 0, o_scipy = 0;
  for (int r = 0; r < rounds; ++r) {
    FitOptions options;
    options.threads = threads;
    auto start = std::chrono::steady_clock::now();
    auto scout = FitLaw<DenseLaw>(points, options);
    const double s_scout = Seconds(start);
    options.polish = 1 << 20;  // no scout: every start to convergence
    start = std::chrono::steady_clock::now();
    auto full = FitLaw<DenseLaw>(points, options);
    const double s_full = Seconds(start);
    t_scout.push_back(s_scout);
    t_full.push_back(s_full);
    if (!scout.ok() || !full.ok()) {
      std::fprintf(stderr, "fit failed\n");
      return 1;
    }
    o_scout = scout->objective;
    o_full = full->objective;
    std::printf(
        "round %d: scout+polish %.2f s (objective %.10f, E %.5f alpha %.5f beta %.5f); "
        "exhaustive %.2f s (objective %.10f)\n",
        r + 1, s_scout, o_scout, scout->params.at("E"), scout->params.at("alpha"),
        scout->params.at("beta"), s_full, o_full);
    if (scipy) {
      start = std::chrono::steady_clock::now();
      std::unique_ptr<FILE, int (*)(FILE*)> pipe(
          popen(
              (python + " " + std::string(XMOD_SOURCE_DIR) + "/bench/fit_scipy.py " + kCsv).c_str(),
              "r"),
          pclose);
      std::string out;
      char buffer[4096];
      while (pipe && fgets(buffer, sizeof buffer, pipe.get())) out += buffer;
      const double s_scipy = Seconds(start);
      t_scipy.push_back(s_scipy);
      const auto j = nlohmann::json::parse(out, nullptr, false);
      if (j.is_discarded()) {
        std::fprintf(stderr, "fit_scipy.py printed: %s\n", out.c_str());
        return 1;
      }
      o_scipy = j["objective"];
      std::printf("round %d: scipy %.2f s (objective %.10f, E %.5f alpha %.5f beta %.5f)\n", r + 1,
                  s_scipy, o_scipy, j["E"].get<double>(), j["alpha"].get<double>(),
                  j["beta"].get<double>());
    }
  }
  using bench::Median;
  using bench::Paired;
  std::printf("\n%d points, 5400 starts, %d threads, median of %d rounds\n",
              static_cast<int>(points.size()), threads, rounds);
  std::printf("scout+polish %.2f s | exhaustive %.2f s | exhaustive / scout+polish %s\n",
              Median(t_scout), Median(t_full), Paired(t_full, t_scout).Text().c_str());
  if (scipy) {
    std::printf("scipy L-BFGS-B %.2f s | scipy / scout+polish %s (scipy objective %.10f)\n",
                Median(t_scipy), Paired(t_scipy, t_scout).Text().c_str(), o_scipy);
  } else {
    std::printf("scipy: skipped (python3 with scipy not found)\n");
  }
  const bool same = o_scout <= o_full * (1 + 1e-9);
  const bool fast = Median(t_scout) <= 5.0;
  std::printf("scout+polish reaches the exhaustive optimum: %s; under 5 s: %s\n",
              same ? "yes" : "NO", fast ? "yes" : "NO");
  return same && fast ? 0 : 1;
}

}  // namespace
}  // namespace xmod

int main(int argc, char** argv) { return xmod::Main(argc, argv); }
