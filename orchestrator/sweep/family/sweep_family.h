// Model families on the sweep side: how a family turns a grid block into points,
// a point into a sized model and the sweep's settings into its routing fields.
// One file per family (dense.cc, depth.cc, moe.cc, deco.cc, mol.cc) and one table
// (table.cc); expand.cc iterates them and names no family.
#ifndef XMOD_ORCHESTRATOR_SWEEP_FAMILY_SWEEP_FAMILY_H_
#define XMOD_ORCHESTRATOR_SWEEP_FAMILY_SWEEP_FAMILY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/accounting.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/section.h"
#include "orchestrator/sweep/spec.h"

namespace xmod {

// One point before sizing: which family, at what capacity and stride; for moe
// its experts per token and granularity. A moe baseline of an X-MoD point is
// sized against that point (match_sparsity, match_stride); a deco point against
// the dense model.
struct GridPoint {
  Family family;
  double sparsity;
  int64_t stride;
  int64_t top_k = 0;
  int64_t granularity = 0;
  bool match_xmod = false;
  double match_sparsity = 0.0;
  int64_t match_stride = 1;
  int64_t softmax_every = 0;  // gdn
};

// What a grid block of a family says about an axis: it must give it, it must not
// (the family fixes it), or the family has no such axis.
enum class AxisRule { kRequired, kFixed, kAbsent };

// Where a family's checks of a sweep report: (line, field, message).
using SpecError =
    std::function<void(int line, const std::string& field, const std::string& message)>;

struct SweepFamily {
  Family id;
  // The family's own section of the sweep file (`moe:`), its options' defaults
  // and how it reads the section (section.h); null section: the family has none.
  const char* section = nullptr;
  nlohmann::json (*section_defaults)() = nullptr;
  void (*parse_section)(SectionReader& reader) = nullptr;
  // The grid axes a block of the family takes: sparsity and stride (with the
  // hint a missing required sparsity axis gets), and whether it sweeps its experts
  // per token and granularity (top_k, granularity).
  AxisRule sparsity_axis = AxisRule::kFixed;
  const char* sparsity_hint = "";
  AxisRule stride_axis = AxisRule::kFixed;
  bool expert_axes = false;
  // Checks of the sweep file beyond the axes: of a block of the family (`prefix`
  // names it, `line` is its line), and of a block that takes it as a baseline.
  void (*check_block)(const SweepSpec& spec, const GridBlock& block, const std::string& prefix,
                      int line, const SpecError& error) = nullptr;
  void (*check_as_baseline)(const SweepSpec& spec, const GridBlock& block, int line,
                            const SpecError& error) = nullptr;
  // The points of a block of this family, and how many (saturating at int64_t).
  std::vector<GridPoint> (*points)(const SweepSpec& spec, const GridBlock& block) = nullptr;
  int64_t (*count)(const SweepSpec& spec, const GridBlock& block) = nullptr;
  // The points it adds as a baseline of `block` (whose own points are `own`), and
  // how many for `own_count` own points. The default: one point of the family.
  std::vector<GridPoint> (*baseline_points)(const SweepSpec& spec, const GridBlock& block,
                                            const std::vector<GridPoint>& own) = nullptr;
  int64_t (*baseline_count)(const SweepSpec& spec, const GridBlock& block,
                            int64_t own_count) = nullptr;
  // The sized model of `point` at `scale` and `context`: job->file.shape, and for a
  // sized baseline job->matched_to and matched_params.
  absl::Status (*shape)(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                        int64_t context, const GridPoint& point, ResolvedJob* job) = nullptr;
  // The routing fields of its job file from the sweep (gate, coefficients, expert
  // training), and the sparsity the job reports where it is not the grid's.
  void (*routing)(const SweepSpec& spec, ResolvedJob* job) = nullptr;
  // What `xmod expand`'s sizing line says of a sized job's layout ("8 experts of
  // width 128, top-2"); null: the family is never sized against another job.
  std::string (*sizing_note)(const ModelShape& shape) = nullptr;
};

// The sweep side of `family` (table.cc); the sweep parser refuses a family that
// has none, so SweepFamilyOf is only asked for families that do.
const SweepFamily& SweepFamilyOf(Family family);
const SweepFamily* FindSweepFamily(Family family);
// Every family's sweep side, in the table's order, then the registered ones (the
// elements never move).
const std::deque<SweepFamily>& SweepFamilies();
// Adds the sweep side of a family registered with RegisterFamily (common/
// family.h); call at start-up, before any other thread reads the table. Fails
// when the family has a row already or its section's name is taken.
absl::Status RegisterSweepFamily(SweepFamily family);

// The options of `family`'s section in `spec`: its defaults with the values the
// file gave over them.
nlohmann::json SectionOptions(const SweepSpec& spec, const SweepFamily& family);

// Helpers the families share (shapes.cc).

// "file:LINE: scales.NAME: " for a problem with the size of a scale's models.
std::string ScaleWhere(const SweepSpec& spec, const ScaleSpec& scale);
// OK when the parameters of `shape` can be counted (CheckModelSize), else a
// refusal at the scale's line naming the point.
absl::Status CheckSize(const SweepSpec& spec, const ScaleSpec& scale, const ModelShape& shape);
// The depth-routing shape of a point: its family at the scale's width, with the
// layers that match the dense model's FLOPs under match: flops.
absl::StatusOr<ModelShape> RoutedShape(const SweepSpec& spec, const ScaleSpec& scale,
                                       int64_t context, Family family, double sparsity,
                                       int64_t stride);
// Where the sweep asks for family `family` in `block`: the block's (or the
// sweep's) family, else its entry in the baselines.
std::pair<std::string, int> FamilyField(const SweepSpec& spec, const GridBlock& block,
                                        Family family);
// The expert count of job->file.shape closest in parameters to job->matched_params
// (the family's sizing target), or a refusal at the family's field; then the size
// check.
absl::Status MatchExperts(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                          const GridPoint& point, ResolvedJob* job);
// SweepFamily::shape for a family without experts: RoutedShape of the point.
absl::Status DepthShape(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                        int64_t context, const GridPoint& point, ResolvedJob* job);
// One point of `family` at sparsity 0 and stride 1 (the default baseline).
std::vector<GridPoint> OnePoint(Family family);
// a · b · ..., or INT64_MAX when it would overflow; 0 when a factor is 0.
int64_t SaturatingProduct(std::initializer_list<int64_t> factors);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SWEEP_FAMILY_SWEEP_FAMILY_H_
