// `xmod advise`'s support (advise_parts.h): the configurations a sweep ran, the
// ranges of their runs, and where each may be searched at a request: inside the
// pooled runs and inside its own, or marked when extrapolating.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/stats.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/advise_parts.h"

namespace xmod {

namespace advise_parts {

std::vector<Configuration> Configurations(const std::vector<LawPoint>& points) {
  std::map<std::string, Configuration> by_name;
  std::map<std::string, std::vector<double>> ratios;
  for (const LawPoint& x : points) {
    const std::string name = ConfigurationName(x);
    Configuration& c = by_name[name];
    if (c.runs == 0) {
      c.name = name;
      c.family = x.dense()                 ? "dense"
                 : x.block_expansion > 0.0 ? "mol"
                 : x.deltanet_share > 0.0  ? "gdn"
                 : x.expansion > 1.0       ? "moe"
                                           : "xmod";
      if (!x.dense()) {
        c.capacity = x.capacity;
        c.stride = x.stride;
        c.expansion = x.expansion;
        c.block_expansion = x.block_expansion;
        c.deltanet_share = x.deltanet_share;
      }
    }
    const double compute = 6.0 * x.n * x.d, tpp = x.d / x.n;
    if (c.runs == 0) {
      c.compute_min = c.compute_max = compute;
      c.n_min = c.n_max = x.n;
      c.tpp_min = c.tpp_max = tpp;
    }
    c.compute_min = std::min(c.compute_min, compute);
    c.compute_max = std::max(c.compute_max, compute);
    c.n_min = std::min(c.n_min, x.n);
    c.n_max = std::max(c.n_max, x.n);
    c.tpp_min = std::min(c.tpp_min, tpp);
    c.tpp_max = std::max(c.tpp_max, tpp);
    ++c.runs;
    ratios[name].push_back(x.NTotal() / x.n);
    if (x.layers > 0) c.layers.emplace_back(x.n, x.layers);
  }
  std::vector<Configuration> out;
  for (auto& [name, c] : by_name) {
    c.total_ratio = c.family == "dense" ? 1.0 : Median(ratios[name]);
    out.push_back(std::move(c));
  }
  // dense first, then by name
  std::stable_sort(out.begin(), out.end(), [](const Configuration& a, const Configuration& b) {
    return (a.family == "dense") > (b.family == "dense");
  });
  return out;
}

namespace {

constexpr double kSlack = 1.0000001;  // a request this close to a range's end is inside

// The ranges a request is held to: every run's (the pooled support) or one
// configuration's own runs'.
struct Ranges {
  double compute_min, compute_max, n_min, n_max, tpp_min, tpp_max;
};

// How far the request lies outside `r`, a clause per range it leaves: C, and with
// --n-active that N_active and its tokens per parameter. `whose` names the runs:
// "the" for every run, "its" for a configuration's.
std::vector<std::string> Outside(const Ranges& r, const AdviseOptions& o,
                                 const std::string& whose) {
  const std::string runs = whose == "the" ? "the runs'" : whose + " runs'";
  std::vector<std::string> why;
  if (o.compute > r.compute_max * kSlack) {
    why.push_back(absl::StrFormat("C = %s FLOPs is %.3gx %s largest compute run (%s)",
                                  Sci(o.compute), o.compute / r.compute_max, whose,
                                  Sci(r.compute_max)));
  } else if (o.compute < r.compute_min / kSlack) {
    why.push_back(absl::StrFormat("C = %s FLOPs is %.3gx below %s smallest compute run (%s)",
                                  Sci(o.compute), r.compute_min / o.compute, whose,
                                  Sci(r.compute_min)));
  }
  if (o.n_active <= 0) return why;
  if (o.n_active > r.n_max * kSlack || o.n_active < r.n_min / kSlack) {
    why.push_back(absl::StrFormat("N_active = %s is outside %s [%s, %s]", Sci(o.n_active), runs,
                                  Sci(r.n_min), Sci(r.n_max)));
  }
  const double tpp = o.compute / (6.0 * o.n_active) / o.n_active;
  if (tpp > r.tpp_max * kSlack || tpp < r.tpp_min / kSlack) {
    why.push_back(
        absl::StrFormat("D / N_active = %.3g tokens per parameter is outside %s [%.3g, %.3g]", tpp,
                        runs, r.tpp_min, r.tpp_max));
  }
  return why;
}

// The N_active range searched for `c` at C inside its own runs' support, or none
// (`outside` then says how far outside them the request is).
std::optional<Search> OwnSearch(const Configuration& c, const AdviseOptions& o,
                                std::string* outside) {
  std::vector<std::string> why =
      Outside({c.compute_min, c.compute_max, c.n_min, c.n_max, c.tpp_min, c.tpp_max}, o, "its");
  Search s = {o.n_active, o.n_active};
  if (o.n_active <= 0) {
    s.lo = std::max(std::sqrt(o.compute / (6.0 * c.tpp_max)), c.n_min);
    s.hi = std::min(std::sqrt(o.compute / (6.0 * c.tpp_min)), c.n_max);
    if (s.lo > s.hi * kSlack && why.empty()) {
      why.push_back(absl::StrFormat(
          "no N_active in its runs' [%s, %s] has tokens per parameter in its [%.3g, %.3g]",
          Sci(c.n_min), Sci(c.n_max), c.tpp_min, c.tpp_max));
    }
  }
  if (why.empty()) return s;
  *outside = absl::StrJoin(why, "; ");
  return std::nullopt;
}

}  // namespace

// The runs' support (into `a`), the N_active range searched at C, and how far
// outside the support the request is (refused unless extrapolating).
absl::StatusOr<Search> Support(const std::vector<LawPoint>& points, const AdviseOptions& o,
                               Advice* out) {
  Advice& a = *out;
  std::set<double> contexts;
  a.n_min = a.compute_min = a.tpp_min = kInf;
  for (const LawPoint& x : points) {
    contexts.insert(x.context);
    a.n_min = std::min(a.n_min, x.n);
    a.n_max = std::max(a.n_max, x.n);
    a.tpp_min = std::min(a.tpp_min, x.d / x.n);
    a.tpp_max = std::max(a.tpp_max, x.d / x.n);
    a.compute_min = std::min(a.compute_min, 6.0 * x.n * x.d);
    a.compute_max = std::max(a.compute_max, 6.0 * x.n * x.d);
  }
  a.contexts.assign(contexts.begin(), contexts.end());
  std::vector<std::string> outside;
  if (contexts.count(o.context) == 0) {
    std::vector<std::string> ran;
    for (double t : a.contexts) ran.push_back(absl::StrFormat("%g", t));
    if (contexts.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--context ", absl::StrFormat("%g", o.context),
          ": the sweep ran T = ", absl::StrJoin(ran, ", "),
          " only; another context needs the dense law with a context term, which needs runs "
          "at two or more contexts (not even --extrapolate answers it): run the sweep at that "
          "context"));
    }
    const double near =
        *std::min_element(a.contexts.begin(), a.contexts.end(), [&](double x, double y) {
          return std::abs(std::log(x / o.context)) < std::abs(std::log(y / o.context));
        });
    outside.push_back(absl::StrFormat(
        "T = %g was not run (the sweep ran T = %s; nearest %g, %.3gx away): its dense "
        "reference comes from the dense-context law",
        o.context, absl::StrJoin(ran, ", "), near,
        o.context > near ? o.context / near : near / o.context));
  }
  // How far outside the support, refused unless extrapolating.
  const Ranges pooled{a.compute_min, a.compute_max, a.n_min, a.n_max, a.tpp_min, a.tpp_max};
  for (std::string& w : Outside(pooled, o, "the")) outside.push_back(std::move(w));
  Search search;
  if (o.n_active > 0) {
    search = {o.n_active, o.n_active};
  } else {
    // Tokens per parameter inside the runs' range; N_active inside theirs too
    // unless extrapolating.
    search.lo = std::sqrt(o.compute / (6.0 * a.tpp_max));
    search.hi = std::sqrt(o.compute / (6.0 * a.tpp_min));
    if (!o.extrapolate || outside.empty()) {
      search.lo = std::max(search.lo, a.n_min);
      search.hi = std::min(search.hi, a.n_max);
    }
    if (search.lo > search.hi * kSlack) {
      if (outside.empty()) {
        outside.push_back(absl::StrFormat(
            "at C = %s no N_active in the runs' [%s, %s] has tokens per parameter in theirs "
            "[%.3g, %.3g]",
            Sci(o.compute), Sci(a.n_min), Sci(a.n_max), a.tpp_min, a.tpp_max));
      }
      search = {std::sqrt(o.compute / (6.0 * a.tpp_max)), std::sqrt(o.compute / (6.0 * a.tpp_min))};
    }
  }
  if (!outside.empty()) {
    if (!o.extrapolate) {
      return absl::InvalidArgumentError(absl::StrCat(
          absl::StrJoin(outside, "; "),
          ": outside what the sweep supports; pass --extrapolate to predict there anyway"));
    }
    a.extrapolation = absl::StrJoin(outside, "; ");
  }

  return search;
}

// Each configuration's search at C inside its own runs, by name, with how far
// outside them it is ("" inside). Outside, a configuration is left out (into
// a->left_out) unless extrapolating, when it is searched as the pooled support
// allows and marked; dense, the reference of every gain, is refused instead.
absl::StatusOr<std::map<std::string, std::pair<Search, std::string>>> OwnSearches(
    const std::vector<Configuration>& configurations, const Search& pooled, const AdviseOptions& o,
    Advice* a) {
  std::map<std::string, std::pair<Search, std::string>> own;
  for (const Configuration& c : configurations) {
    std::string outside;
    const std::optional<Search> s = OwnSearch(c, o, &outside);
    if (s) {
      own[c.name] = {*s, ""};
    } else if (o.extrapolate) {
      own[c.name] = {pooled, outside};
    } else if (c.family == "dense") {
      return absl::InvalidArgumentError(
          absl::StrCat("dense: ", outside,
                       ": outside the dense runs, against which every gain is read; "
                       "pass --extrapolate to predict there anyway"));
    } else {
      a->left_out.push_back(absl::StrCat(c.name, " (", outside, ")"));
    }
  }
  return own;
}

// Notes on each row's support: an optimum on the searched range's edge, a row
// ranked outside its own runs (--extrapolate) with its distances, and the rows
// left out.
void SupportNotes(Advice* a) {
  for (const ConfigurationAdvice& r : a->rows) {
    const Configuration& c = r.configuration;
    if (r.at_edge && a->options.n_active == 0) {
      a->notes.push_back(absl::StrCat(c.name,
                                      ": its best N_active sits on the edge of the searched range "
                                      "(the optimum may lie outside what the sweep ran)"));
    }
    if (r.extrapolation.empty()) continue;
    a->notes.push_back(absl::StrFormat(
        "EXTRAPOLATING %s beyond its own runs: %s; at its best N_active %s it trains %.3g tokens "
        "per parameter (its runs: N_active %s-%s, %.3g-%.3g tokens per parameter)",
        c.name, r.extrapolation, Sci(r.n_active), r.n_active > 0 ? r.tokens / r.n_active : 0.0,
        Sci(c.n_min), Sci(c.n_max), c.tpp_min, c.tpp_max));
  }
  if (!a->left_out.empty()) {
    a->notes.push_back(absl::StrCat(
        "not ranked, the request being outside their own runs (--extrapolate ranks them, "
        "marked): ",
        absl::StrJoin(a->left_out, "; ")));
  }
}

}  // namespace advise_parts

using advise_parts::kInf;

LawPoint Configuration::At(double n, double d, double context) const {
  LawPoint x;
  x.n = n;
  x.d = d;
  x.loss = 1.0;
  x.context = context;
  x.family = family;
  x.capacity = capacity;
  x.stride = stride;
  x.expansion = expansion;
  x.block_expansion = block_expansion;
  x.deltanet_share = deltanet_share;
  x.n_total = n * total_ratio;
  double nearest = kInf;
  for (const auto& [runs_n, l] : layers) {
    const double distance = std::abs(std::log(runs_n / n));
    if (distance < nearest) {
      nearest = distance;
      x.layers = l;
    }
  }
  return x;
}

double DefaultCompute(const std::vector<LawPoint>& points) {
  double compute = 0.0;
  for (const Configuration& c : advise_parts::Configurations(points)) {
    compute = compute == 0.0 ? c.compute_max : std::min(compute, c.compute_max);
  }
  return compute;
}

std::vector<Configuration> SweepConfigurations(const std::vector<LawPoint>& points) {
  return advise_parts::Configurations(points);
}

}  // namespace xmod
