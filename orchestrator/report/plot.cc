// `xmod plot`: four plots of a sweep, drawn by gnuplot from data files and scripts
// written next to the images (so a user can restyle them and rerun gnuplot).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/report/report.h"
#include "orchestrator/report/views.h"

namespace xmod {

namespace {

namespace fs = std::filesystem;

// Colour-blind-safe palette (Okabe-Ito), then a few more.
const char* const kColours[] = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#0072B2",
                                "#D55E00", "#CC79A7", "#F0E442", "#7f7f7f", "#8c564b"};
constexpr int kNumColours = sizeof(kColours) / sizeof(kColours[0]);

std::optional<std::string> FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return std::nullopt;
}

// Runs gnuplot on `script` inside `dir`; its messages go to <script>.log.
absl::Status RunGnuplot(const std::string& gnuplot, const fs::path& dir,
                        const std::string& script) {
  const std::string log = (dir / (script + ".log")).string();
  std::fflush(nullptr);  // nothing buffered may be written twice by the child
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    const int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_WRONLY);
    if (err < 0 || null < 0 || ::chdir(dir.c_str()) != 0 || ::dup2(err, 2) < 0 ||
        ::dup2(null, 1) < 0) {
      ::_exit(126);
    }
    ::execl(gnuplot.c_str(), "gnuplot", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError("waiting for gnuplot failed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return absl::InternalError(
        absl::StrCat("gnuplot failed on ", (dir / script).string(), " (",
                     WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                                       : absl::StrCat("signal ", WTERMSIG(status)),
                     WIFEXITED(status) && WEXITSTATUS(status) >= 126 ? ": could not start" : "",
                     "): ", text.substr(0, 2000)));
  }
  return absl::OkStatus();
}

// The configuration a job belongs to, for colours and legends.
std::string ConfigLabel(const JobResultRow& j) {
  if (!j.routed()) return "dense";
  return FamilyLabel(j.family, {j.capacity, j.stride, j.experts, j.top_k, j.sparsity});
}

// A stable order of configurations: by the families' plot ranks (dense, MoD,
// X-MoD, MoE, DECO, then registered families), depth-routing ones by capacity
// (largest first) and stride, expert ones by experts and experts per token.
std::vector<std::string> ConfigOrder(const std::vector<JobResultRow>& jobs) {
  std::map<std::tuple<int, double, int64_t>, std::string> ordered;
  for (const JobResultRow& j : jobs) {
    if (!j.routed()) {
      ordered[{0, 0.0, 0}] = ConfigLabel(j);
      continue;
    }
    // Expert families and mol: by their (routed) block count and top-k.
    const RoutingKind routing = Traits(j.family).routing;
    const bool experts = routing == RoutingKind::kExperts || routing == RoutingKind::kLayers;
    ordered[{FamilyPlotRank(j.family), experts ? 0.0 : -j.capacity,
             experts ? j.experts * 1000 + j.top_k : j.stride}] = ConfigLabel(j);
  }
  std::vector<std::string> labels;
  for (const auto& [key, label] : ordered) labels.push_back(label);
  return labels;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
    } else if (std::string_view("_^{}@&~").find(c) != std::string_view::npos) {
      out += "\\\\";  // enhanced text: the character itself, not markup
    }
    out += c;
  }
  return out + "\"";
}

struct Plotter {
  fs::path dir;
  std::string image;  // svg or png
  std::string sweep;

  std::string Header(const std::string& name) const {
    const std::string terminal =
        image == "png" ? "pngcairo size 1200,760 enhanced font 'Sans,11'"
                       : "svg size 1200,760 dynamic enhanced font 'Sans,12' background rgb 'white'";
    return fmt::format(
        "set encoding utf8\nset terminal {}\nset output '{}.{}'\nset grid lc rgb '#dddddd'\n"
        "set border lw 1.2\nset key outside right top box opaque samplen 2 spacing 1.1\n",
        terminal, name, image);
  }
  std::string File(const std::string& name) const { return (dir / name).string(); }
};

std::string LogTics() { return "set format x '10^{%L}'\n"; }

// A log y axis over [lo, hi] (padded) with readable tics: gnuplot's own would
// only mark powers of ten, and a loss axis rarely spans one.
std::string LogYAxis(double lo, double hi) {
  if (!(lo > 0 && lo <= hi && std::isfinite(hi))) return "";  // gnuplot's own range
  lo *= 0.97;
  hi *= 1.03;
  std::vector<std::string> tics;
  // Coarse mantissas first; finer ones when the range holds fewer than four tics.
  for (const std::vector<double>& mantissas :
       {std::vector<double>{1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0},
        std::vector<double>{1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4, 2.6, 2.8, 3.0, 3.5, 4.0, 4.5,
                            5.0, 6.0, 7.0, 8.0, 9.0}}) {
    tics.clear();
    for (double decade = std::pow(10.0, std::floor(std::log10(lo))); decade <= hi; decade *= 10) {
      for (double m : mantissas) {
        const double v = m * decade;
        if (v >= lo && v <= hi) tics.push_back(fmt::format("'{:g}' {:g}", v, v));
      }
    }
    if (tics.size() >= 4) break;
  }
  return fmt::format("set yrange [{:.6g}:{:.6g}]\nset ytics ({})\nset mytics 1\n", lo, hi,
                     absl::StrJoin(tics, ", "));
}

// A law's points among the finished runs, or none when its runs span several
// granularities (no law has a granularity term; `xmod fit --granularity` picks one).
std::vector<LawPoint> PlotPoints(const LawSpec& law, const std::vector<JobResultRow>& done) {
  std::set<int64_t> granularities;
  for (const JobResultRow& j : done) {
    const std::string family(FamilyName(j.family));
    const bool read = std::count(law.families.begin(), law.families.end(), family) > 0;
    if (read && j.granularity != 0) granularities.insert(j.granularity);
  }
  if (granularities.size() > 1) return {};
  PointOptions options;
  options.law = law.name;
  return FitPoints(done, options);
}

// The dense law's loss against training FLOPs at each dense scale's N
// (DenseLawViews): writes law_curves.dat, returns the plot list to append.
std::string DenseLawCurves(const Plotter& plot, const std::vector<LawLine>& lines) {
  std::string plots;
  std::ofstream curves(plot.File("law_curves.dat"));
  int block = 0;
  for (const LawLine& line : lines) {
    curves << fmt::format("# dense law at N = {:.6g}\n", line.n);
    for (const auto& [c, l] : line.points) curves << fmt::format("{:.9g} {:.9g}\n", c, l);
    curves << "\n\n";
    plots += fmt::format(
        ", \\\n     'law_curves.dat' index {} using 1:2 with lines dt 2 lw 1.3 "
        "lc rgb '#555555' title {}",
        block++, Quote(fmt::format("dense law, N={:.3g}", line.n)));
  }
  return plots;
}

// The dense law's isoFLOP profiles (DenseLawViews) with the lowest point of each:
// writes isoflop.dat and isoflop_min.dat and returns the gnuplot plot list.
std::string IsoFlopPlots(const Plotter& plot, const std::vector<IsoFlopProfile>& profiles,
                         double* iso_lo, double* iso_hi) {
  std::string plots;
  std::ofstream iso(plot.File("isoflop.dat"));
  std::ofstream minima(plot.File("isoflop_min.dat"));
  int b = 0;
  for (const IsoFlopProfile& p : profiles) {
    iso << fmt::format("# C = {:.4g} FLOPs\n", p.flops);
    for (const auto& [n, l] : p.points) {
      iso << fmt::format("{:.9g} {:.9g}\n", n, l);
      if (std::isfinite(l)) {
        *iso_lo = std::min(*iso_lo, l);
        *iso_hi = std::max(*iso_hi, l);
      }
    }
    iso << "\n\n";
    minima << fmt::format("{:.9g} {:.9g}\n", p.lowest.first, p.lowest.second);
    plots += fmt::format(
        "{}'isoflop.dat' index {} using 1:2 with lines lw 2 lc rgb '{}' "
        "title {}",
        plots.empty() ? "" : ", \\\n     ", b, kColours[(b + 1) % kNumColours],
        Quote(fmt::format("C = {:.3g} FLOPs", p.flops)));
    ++b;
  }
  iso.close();
  minima.close();
  plots +=
      ", \\\n     'isoflop_min.dat' using 1:2 with points pt 6 ps 1.8 lw 2 lc rgb "
      "'#000000' title 'lowest predicted loss on the plotted N range'";
  return plots;
}

// One `xmod plot` run: what every plot reads, and one member function per plot.
// Each adds the image it wrote to `written`, or says in `problems` why it could not.
class PlotRun {
 public:
  PlotRun(const PlotCommandOptions& options, std::string gnuplot_path, SqliteStore* sweep_store,
          std::vector<JobResultRow> succeeded)
      : o(options),
        gnuplot(std::move(gnuplot_path)),
        store(sweep_store),
        plot{fs::absolute(options.out_dir), options.image, options.sweep},
        done(std::move(succeeded)),
        configs(ConfigOrder(done)),
        points(FitPoints(done)) {
    this->options.fit.threads = options.threads;
  }

  // 1. Validation loss vs tokens, every job, one colour per configuration.
  absl::Status LossVsTokens();
  // 2. Final loss vs training FLOPs with the dense law's curves; isoFLOP profiles.
  absl::Status LossVsFlops();
  // 3. Predicted vs observed loss: the X-MoD law without the largest scale (the
  // MoE law for a sweep with MoE runs and no X-MoD runs; the dense law, or no
  // hold-out, when the sweep cannot support that).
  absl::Status PredictedVsObserved();
  // 4. Sparse runs relative to their FLOP-matched dense baseline (same scale,
  // context and budget), across sparsity and stride.
  absl::Status XmodVsDense();
  // 5. Compute-matched pairs (PairedDifferences): each routed configuration's
  // mean loss minus its dense partners', with the 95% seed interval, one panel per
  // family on its own sparsity axis, labelled with what the pair matches.
  absl::Status Pairs();

  const PlotCommandOptions& o;
  std::optional<std::string> gnuplot;
  SqliteStore* store;
  Plotter plot;
  std::vector<JobResultRow> done;
  std::vector<std::string> configs;
  std::vector<LawPoint> points;
  AnalysisOptions options;
  std::vector<std::string> written;
  std::vector<std::string> problems;

 private:
  const char* colour(const std::string& label) const {
    const size_t i = std::find(configs.begin(), configs.end(), label) - configs.begin();
    return kColours[i % kNumColours];
  }
};

absl::Status PlotRun::LossVsTokens() {
  std::ofstream data(plot.File("curves.dat"));
  std::string plots;
  std::set<std::string> titled;
  int block = 0;
  double y_lo = 1e300, y_hi = 0.0;
  std::vector<JobResultRow> ordered = done;
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const JobResultRow& a, const JobResultRow& b) {
                     return std::find(configs.begin(), configs.end(), ConfigLabel(a)) <
                            std::find(configs.begin(), configs.end(), ConfigLabel(b));
                   });
  for (const JobResultRow& j : ordered) {
    ASSIGN_OR_RETURN(QueryResult curve, store->JobCurve(j.id));
    size_t tokens_col = 0, val_col = 0;
    for (size_t c = 0; c < curve.columns.size(); ++c) {
      if (curve.columns[c] == "tokens") tokens_col = c;
      if (curve.columns[c] == "val_loss") val_col = c;
    }
    std::string rows;
    for (const auto& row : curve.rows) {
      const auto* v = std::get_if<double>(&row[val_col]);
      const auto* t = std::get_if<int64_t>(&row[tokens_col]);
      if (v == nullptr || t == nullptr || *t <= 0 || !(*v > 0) || !std::isfinite(*v)) continue;
      y_lo = std::min(y_lo, *v);
      y_hi = std::max(y_hi, *v);
      rows += fmt::format("{} {:.9g}\n", *t, *v);
    }
    if (rows.empty()) continue;
    const std::string label = ConfigLabel(j);
    data << fmt::format("# job {} scale {} T {} ({})\n{}\n\n", j.id, j.scale, j.context, label,
                        rows);
    const bool first = titled.insert(label).second;
    plots += fmt::format("{}'curves.dat' index {} using 1:2 with lines lw 1.4 lc rgb '{}' {}",
                         plots.empty() ? "" : ", \\\n     ", block++, colour(label),
                         first ? "title " + Quote(label) : "notitle");
  }
  data.close();
  if (block == 0) {
    problems.push_back("loss_vs_tokens: no job has validation points");
  } else {
    std::ofstream gp(plot.File("loss_vs_tokens.gp"));
    gp << plot.Header("loss_vs_tokens")
       << fmt::format("set title {}\n",
                      Quote(fmt::format("Sweep {}: validation loss during training ({} jobs)",
                                        o.sweep, block)))
       << "set xlabel 'training tokens seen (log scale)'\n"
          "set ylabel 'validation loss (nats per token, log scale)'\n"
          "set logscale xy\n"
       << LogTics() << LogYAxis(y_lo, y_hi) << "set key title 'configuration'\n"
       << "plot " << plots << "\n";
    gp.close();
    RETURN_IF_ERROR(RunGnuplot(*gnuplot, plot.dir, "loss_vs_tokens.gp"));
    written.push_back("loss_vs_tokens." + o.image);
  }
  return absl::OkStatus();
}

absl::Status PlotRun::LossVsFlops() {
  options.law = "dense";
  absl::StatusOr<LawReport> dense = FitNamedLaw(points, options);
  std::ofstream data(plot.File("final.dat"));
  data << "# train_flops final_val_loss config_index job_id\n";
  for (const JobResultRow& j : done) {
    const std::string label = ConfigLabel(j);
    data << fmt::format("{:.9g} {:.9g} {} {}\n", j.train_flops, *j.final_val_loss,
                        std::find(configs.begin(), configs.end(), label) - configs.begin(), j.id);
  }
  data.close();
  std::string left;
  for (size_t k = 0; k < configs.size(); ++k) {
    left += fmt::format(
        "{}'final.dat' using 1:($3=={} ? $2 : 1/0) with points pt 7 ps 0.9 "
        "lc rgb '{}' title {}",
        left.empty() ? "" : ", \\\n     ", k, kColours[k % kNumColours], Quote(configs[k]));
  }
  double y_lo = 1e300, y_hi = 0.0;
  for (const JobResultRow& j : done) {
    y_lo = std::min(y_lo, *j.final_val_loss);
    y_hi = std::max(y_hi, *j.final_val_loss);
  }
  double iso_lo = 1e300, iso_hi = 0.0;
  std::string right, law_note;
  if (dense.ok()) {
    const LawReport& r = *dense;
    const double e = r.fit.params.at("E"), a = r.fit.params.at("A"), b = r.fit.params.at("B"),
                 alpha = r.fit.params.at("alpha"), beta = r.fit.params.at("beta");
    const DenseLawView view = DenseLawViews(DenseLoss(e, a, b, alpha, beta), done);
    left += DenseLawCurves(plot, view.lines);
    right = IsoFlopPlots(plot, view.isoflop, &iso_lo, &iso_hi);
    law_note = fmt::format(
        "dense law fitted on {} dense runs: E={:.3g}, A={:.3g}, B={:.3g}, "
        "α={:.3f}, β={:.3f}",
        r.fit.n_points, e, a, b, alpha, beta);
  } else {
    law_note = absl::StrCat("no dense law: ", dense.status().message());
    problems.push_back(absl::StrCat("loss_vs_flops: ", law_note));
  }
  std::ofstream gp(plot.File("loss_vs_flops.gp"));
  gp << plot.Header("loss_vs_flops") << "set multiplot layout 1,2 title "
     << Quote(fmt::format("Sweep {}: final loss vs training compute\n{}", o.sweep, law_note))
     << "\n"
     << "set logscale xy\n"
     << LogTics() << LogYAxis(y_lo, y_hi)
     << "set key inside right top box opaque font ',9'\n"
        "set title 'final validation loss vs training FLOPs (runs and dense law)'\n"
        "set xlabel 'training FLOPs (log scale)'\n"
        "set ylabel 'final validation loss (nats per token)'\n"
     << "plot " << left << "\n";
  if (!right.empty()) {
    gp << LogYAxis(iso_lo, iso_hi)
       << "set title 'isoFLOP profiles of the dense law'\n"
          "set xlabel 'non-embedding parameters N (log scale)'\n"
          "set ylabel 'predicted loss (nats per token)'\n"
       << "plot " << right << "\n";
  }
  gp << "unset multiplot\n";
  gp.close();
  RETURN_IF_ERROR(RunGnuplot(*gnuplot, plot.dir, "loss_vs_flops.gp"));
  written.push_back("loss_vs_flops." + o.image);
  return absl::OkStatus();
}

absl::Status PlotRun::PredictedVsObserved() {
  absl::StatusOr<LawReport> fit = absl::UnknownError("not fitted");
  std::vector<std::string> tried;
  // The two-stage laws first (they read the most runs), then the others; a law
  // whose points hold none of its own runs beyond the dense ones is not tried.
  std::vector<const LawSpec*> order;
  for (bool two_stage : {true, false}) {
    for (const LawSpec& law : Laws()) {
      if (law.two_stage == two_stage) order.push_back(&law);
    }
  }
  for (const LawSpec* law : order) {
    const std::vector<LawPoint> law_points = PlotPoints(*law, done);
    if (law->two_stage &&
        std::none_of(law_points.begin(), law_points.end(),
                     [&](const LawPoint& x) { return !x.dense() && law->reads(x); })) {
      continue;
    }
    for (bool holdout : {true, false}) {
      options.law = law->name;
      options.holdout_largest = holdout;
      fit = FitNamedLaw(law_points, options);
      if (fit.ok()) break;
      tried.push_back(
          absl::StrCat(law->name, holdout ? " with hold-out" : "", ": ", fit.status().message()));
    }
    if (fit.ok()) break;
  }
  options.holdout_largest = false;
  if (!fit.ok()) {
    problems.push_back(absl::StrCat("predicted_vs_observed: no law could be fitted (",
                                    absl::StrJoin(tried, "; "), ")"));
  } else {
    const LawReport& r = *fit;
    std::ofstream data(plot.File("predicted.dat"));
    data << "# observed predicted config_index held_out job_id\n";
    double lo = 1e300, hi = 0;
    std::map<std::string, const JobResultRow*> by_id;
    for (const JobResultRow& j : done) by_id[j.id] = &j;
    auto row = [&](const LawPoint& p, double predicted, int held) {
      const std::string label = ConfigLabel(*by_id.at(p.id));
      lo = std::min({lo, p.loss, predicted});
      hi = std::max({hi, p.loss, predicted});
      data << fmt::format("{:.9g} {:.9g} {} {} {}\n", p.loss, predicted,
                          std::find(configs.begin(), configs.end(), label) - configs.begin(), held,
                          p.id);
    };
    for (const LawPoint& p : r.points) row(p, r.Predict(p).value_or(0.0), 0);
    for (const HoldoutPoint& h : r.holdout) row(h.point, h.predicted, 1);
    data.close();
    std::set<std::string> fitted_configs;
    for (const LawPoint& p : r.points) fitted_configs.insert(ConfigLabel(*by_id.at(p.id)));
    std::string plots =
        fmt::format("x with lines lw 1 lc rgb '#888888' title 'predicted = observed'");
    for (size_t k = 0; k < configs.size(); ++k) {
      if (fitted_configs.count(configs[k]) == 0) continue;
      plots += fmt::format(
          ", \\\n     'predicted.dat' using 1:(($3=={} && $4==0) ? $2 : 1/0) "
          "with points pt 7 ps 0.9 lc rgb '{}' title {}",
          k, kColours[k % kNumColours], Quote(configs[k] + " (fitted)"));
    }
    if (!r.holdout.empty()) {
      plots += fmt::format(
          ", \\\n     'predicted.dat' using 1:($4==1 ? $2 : 1/0) with points "
          "pt 4 ps 1.7 lw 2 lc rgb '#E41A1C' title {}",
          Quote(fmt::format("held out: scale {} (RMSE of log-loss {:.3f})", r.holdout_scale,
                            r.holdout_rmse)));
    }
    const double pad = 0.03 * (hi - lo);
    std::ofstream gp(plot.File("predicted_vs_observed.gp"));
    gp << plot.Header("predicted_vs_observed")
       << fmt::format(
              "set title {}\n",
              Quote(fmt::format(
                  "Sweep {}: {} law ({}) fitted on {} runs{}\nin-sample RMSE of "
                  "log-loss {:.3f}",
                  o.sweep, FindLaw(r.law) != nullptr ? FindLaw(r.law)->label : r.law, r.method,
                  r.fit.n_points,
                  r.holdout.empty() ? "" : ", largest scale " + r.holdout_scale + " held out",
                  r.fit.rmse)))
       << "set xlabel 'observed final validation loss (nats per token)'\n"
          "set ylabel 'predicted final validation loss (nats per token)'\n"
       << fmt::format("set xrange [{:.6g}:{:.6g}]\nset yrange [{:.6g}:{:.6g}]\nset size ratio -1\n",
                      lo - pad, hi + pad, lo - pad, hi + pad)
       << "set key title 'runs'\n"
       << "plot " << plots << "\n";
    gp.close();
    RETURN_IF_ERROR(RunGnuplot(*gnuplot, plot.dir, "predicted_vs_observed.gp"));
    written.push_back("predicted_vs_observed." + o.image);
  }
  return absl::OkStatus();
}

absl::Status PlotRun::XmodVsDense() {
  // One series per X-MoD stride and per baseline (RelativeToDense).
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  std::set<double> sparsities;
  for (const RelativeToDensePoint& p : RelativeToDense(done)) {
    series[p.series].push_back({p.sparsity, p.relative_pct});
    sparsities.insert(p.sparsity);
  }
  if (series.empty()) {
    problems.push_back(
        "xmod_vs_dense: no sparse run has a finished dense run at the same scale, context and "
        "budget");
  } else {
    std::ofstream data(plot.File("relative.dat"));
    std::ofstream means(plot.File("relative_mean.dat"));
    std::string plots;
    int k = 0;
    const double spread = 0.02 * std::max(0.1, *sparsities.rbegin() - *sparsities.begin());
    for (const auto& [name, values] : series) {
      // Series side by side around each sparsity, so the points do not overlap.
      const double offset = (k - (static_cast<double>(series.size()) - 1) / 2.0) * spread;
      data << "# " << name << "\n";
      means << "# " << name << "\n";
      std::map<double, std::pair<double, int>> mean;
      for (const auto& [s, v] : values) {
        data << fmt::format("{:.6g} {:.6g}\n", s + offset, v);
        mean[s].first += v;
        mean[s].second += 1;
      }
      for (const auto& [s, sum] : mean) {
        means << fmt::format("{:.6g} {:.6g}\n", s + offset, sum.first / sum.second);
      }
      data << "\n\n";
      means << "\n\n";
      const char* c =
          name.rfind("MoD baseline", 0) == 0 ? kColours[1] : kColours[(k + 3) % kNumColours];
      plots += fmt::format(
          "{}'relative.dat' index {} using 1:2 with points pt 7 ps 0.8 lc rgb "
          "'{}' title {}, \\\n     'relative_mean.dat' index {} using 1:2 with "
          "linespoints pt 9 ps 1.6 lw 2 lc rgb '{}' title {}",
          plots.empty() ? "" : ", \\\n     ", k, c, Quote(name + ": each run"), k, c,
          Quote(name + ": mean"));
      ++k;
    }
    data.close();
    means.close();
    std::vector<std::string> tics;
    for (double s : sparsities) tics.push_back(fmt::format("'{:g}' {:g}", s, s));
    const double lo = *sparsities.begin(), hi = *sparsities.rbegin();
    const double margin = std::max(0.05, 0.15 * (hi - lo));
    std::ofstream gp(plot.File("xmod_vs_dense.gp"));
    gp << plot.Header("xmod_vs_dense")
       << fmt::format("set title {}\n",
                      Quote(fmt::format("Sweep {}: sparse runs vs their FLOP-matched dense "
                                        "baseline (same scale, context, budget)",
                                        o.sweep)))
       << "set xlabel 'sparsity σ (fraction of tokens that skip a routed layer)'\n"
          "set ylabel 'final validation loss relative to dense (%)'\n"
       << fmt::format("set xrange [{:.6g}:{:.6g}]\nset xtics ({})\n", lo - margin, hi + margin,
                      absl::StrJoin(tics, ", "))
       << "set arrow from graph 0, first 0 to graph 1, first 0 nohead lc rgb '#444444' dt 2\n"
       << "plot " << plots << "\n";
    gp.close();
    RETURN_IF_ERROR(RunGnuplot(*gnuplot, plot.dir, "xmod_vs_dense.gp"));
    written.push_back("xmod_vs_dense." + o.image);
  }
  return absl::OkStatus();
}

absl::Status PlotRun::Pairs() {
  const QueryResult t = PairedDifferences(done);
  if (t.rows.empty()) {
    problems.push_back(
        "pairs: no routed configuration has finished dense runs of the same scale, context and "
        "budget");
    return absl::OkStatus();
  }
  auto column = [&](const char* name) {
    return static_cast<size_t>(std::find(t.columns.begin(), t.columns.end(), name) -
                               t.columns.begin());
  };
  auto number = [](const Value& v) {
    if (const double* d = std::get_if<double>(&v)) return *d;
    if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    return std::nan("");
  };
  auto text = [](const Value& v) {
    const std::string* s = std::get_if<std::string>(&v);
    return s != nullptr ? *s : std::string();
  };
  const size_t family = column("family"), sparsity = column("sparsity"),
               kind = column("sparsity_kind"), stride = column("stride"),
               experts = column("experts"), pct = column("diff_pct"), low = column("low_95"),
               high = column("high_95"), dense_loss = column("dense_loss"),
               matched = column("matched"), flag = column("capacity_flag");
  // family -> setting (stride or experts) -> rows
  std::map<std::string, std::map<std::string, std::vector<const std::vector<Value>*>>> panels;
  for (const auto& row : t.rows) {
    const std::string setting = std::isnan(number(row[stride]))
                                    ? text(row[experts])
                                    : fmt::format("stride s={:g}", number(row[stride]));
    panels[text(row[family])][setting].push_back(&row);
  }
  const std::map<std::string, std::string> names = {
      {"xmod", "X-MoD"}, {"mod", "MoD"}, {"moe", "MoE"}, {"deco", "DECO"}};
  std::ofstream data(plot.File("pairs.dat"));
  std::ofstream gp(plot.File("pairs.gp"));
  gp << plot.Header("pairs")
     << fmt::format(
            "set multiplot layout 1,{} title {}\n", panels.size(),
            Quote(fmt::format("Sweep {}: compute-matched pairs, loss minus the dense runs of "
                              "the same scale, context and budget (causal metric for routed "
                              "runs; bars: 95% seed interval)",
                              o.sweep)));
  int block = 0;
  for (const auto& [fam, settings] : panels) {
    std::set<std::string> kinds, matches;
    int flagged = 0;
    std::string plots;
    int k = 0;
    // Settings and scales side by side around each sparsity, so that the bars do
    // not hide one another.
    std::set<double> xs;
    std::set<std::string> scale_names;
    for (const auto& [setting, rows] : settings) {
      for (const auto* row : rows) {
        xs.insert(number((*row)[sparsity]));
        scale_names.insert(text((*row)[column("scale")]));
      }
    }
    const double span = xs.size() > 1 ? *xs.rbegin() - *xs.begin() : 0.1;
    const std::vector<std::string> scale_order(scale_names.begin(), scale_names.end());
    for (const auto& [setting, rows] : settings) {
      data << "# " << fam << " " << setting << "\n";
      for (const auto* row : rows) {
        const double base = number((*row)[dense_loss]);
        const double lo = number((*row)[low]), hi = number((*row)[high]);
        const double y = number((*row)[pct]);
        const double scale_at = static_cast<double>(
            std::find(scale_order.begin(), scale_order.end(), text((*row)[column("scale")])) -
            scale_order.begin());
        const double offset =
            span * (0.04 * (k - (static_cast<double>(settings.size()) - 1) / 2.0) +
                    0.012 * (scale_at - (static_cast<double>(scale_order.size()) - 1) / 2.0));
        data << fmt::format("{:.6g} {:.6g} {:.6g} {:.6g}\n", number((*row)[sparsity]) + offset, y,
                            std::isnan(lo) ? y : 100.0 * lo / base,
                            std::isnan(hi) ? y : 100.0 * hi / base);
        kinds.insert(text((*row)[kind]));
        matches.insert(text((*row)[matched]));
        flagged += !text((*row)[flag]).empty();
      }
      data << "\n\n";
      plots += fmt::format(
          "{}'pairs.dat' index {} using 1:2:3:4 with yerrorbars pt 7 ps 1 lw 1.5 lc rgb '{}' "
          "title {}",
          plots.empty() ? "" : ", \\\n     ", block, kColours[(k + 3) % kNumColours],
          Quote(setting));
      ++block;
      ++k;
    }
    const auto pretty = names.find(fam);
    gp << fmt::format(
              "set title {}\n",
              Quote(fmt::format(
                  "{}; matched: {}{}", pretty != names.end() ? pretty->second : fam,
                  absl::StrJoin(matches, ", "),
                  flagged > 0 ? fmt::format("; {} capacity flag(s)", flagged) : std::string())))
       << fmt::format("set xlabel {}\n",
                      Quote(fmt::format("sparsity: {}{}", absl::StrJoin(kinds, ", "),
                                        scale_order.size() > 1
                                            ? fmt::format("\nscales {} left to right at each point",
                                                          absl::StrJoin(scale_order, ", "))
                                            : std::string())))
       << "set ylabel 'loss minus dense (% of dense)'\nset offsets graph 0.1, graph 0.1, "
          "graph 0.1, graph 0.1\nset key inside top left\n"
       << "set arrow 1 from graph 0, first 0 to graph 1, first 0 nohead lc rgb '#444444' dt 2\n"
       << "plot " << plots << "\n";
  }
  gp << "unset multiplot\n";
  data.close();
  gp.close();
  RETURN_IF_ERROR(RunGnuplot(*gnuplot, plot.dir, "pairs.gp"));
  written.push_back("pairs." + o.image);
  return absl::OkStatus();
}

}  // namespace

absl::Status RunPlotCommand(const PlotCommandOptions& o, std::ostream& out) {
  if (o.image != "svg" && o.image != "png") {
    return absl::InvalidArgumentError(absl::StrCat("--image ", o.image, ": use svg or png"));
  }
  const std::optional<std::string> gnuplot = FindOnPath("gnuplot");
  if (!gnuplot) {
    return absl::FailedPreconditionError(
        "xmod plot draws with gnuplot, which is not on PATH (apt-get install gnuplot-nox; "
        "deploy/install-deps.sh installs it)");
  }
  SqliteStore::Options store_options;
  store_options.path = o.db;
  store_options.read_only = true;
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store, SqliteStore::Open(store_options));
  ASSIGN_OR_RETURN(std::vector<JobResultRow> jobs, store->JobResultRows(o.sweep));
  std::vector<JobResultRow> done;
  for (const JobResultRow& j : jobs) {
    if (j.state == JobState::kSucceeded && j.final_val_loss.has_value()) done.push_back(j);
  }
  if (done.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sweep '", o.sweep, "': no succeeded job with a validation loss to plot"));
  }
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(o.out_dir, ": ", ec.message()));
  PlotRun run(o, *gnuplot, store.get(), std::move(done));
  RETURN_IF_ERROR(run.LossVsTokens());
  RETURN_IF_ERROR(run.LossVsFlops());
  RETURN_IF_ERROR(run.PredictedVsObserved());
  RETURN_IF_ERROR(run.XmodVsDense());
  RETURN_IF_ERROR(run.Pairs());
  for (const std::string& w : run.written) out << (run.plot.dir / w).string() << "\n";
  if (!run.problems.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("wrote ", run.written.size(), " of 5 plots; ",
                                                      absl::StrJoin(run.problems, "; ")));
  }
  return absl::OkStatus();
}

}  // namespace xmod
