// Mixture of Layers (docs/mol.md): every layer a split stage of thin blocks, a
// token routed to k of the routed ones; Gated DeltaNet (or softmax) mixes inside
// the routed blocks, softmax attention inside the shared ones. Its options are the
// job file's "mol" object; its CV² balancing coefficient α is the job's
// balance_coef.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/families/families.h"
#include "common/job_file.h"
#include "common/json_reader.h"
#include "common/mol_accounting.h"

namespace xmod {

namespace {

using LD = long double;

int64_t HeadDim(const ModelShape& s) { return s.n_heads > 0 ? s.d_model / s.n_heads : 0; }

// One thin block's parameters: down and up projections, two RMSNorms, its mixer
// and its SwiGLU MLP.
LD ThinBlockParams(const ModelShape& s, bool deltanet) {
  const LD d = static_cast<LD>(s.d_model), t = static_cast<LD>(s.mol.thin_width);
  const LD mixer =
      deltanet ? static_cast<LD>(DeltaNetMixerParams(s.mol.thin_width, HeadDim(s))) : 4 * t * t;
  return 2 * d * t + 2 * t + mixer + 3 * t * static_cast<LD>(DefaultDff(s.mol.thin_width));
}

// Its forward FLOPs per token it runs on, without softmax attention's T-dependent part.
double ThinBlockFlops(const ModelShape& s, bool deltanet) {
  const double d = static_cast<double>(s.d_model), t = static_cast<double>(s.mol.thin_width);
  const double mixer =
      deltanet ? DeltaNetMixerFlops(s.mol.thin_width, HeadDim(s)) : 2.0 * 4.0 * t * t;
  return 2.0 * 2.0 * d * t + mixer +
         2.0 * 3.0 * t * static_cast<double>(DefaultDff(s.mol.thin_width));
}

// Every layer is one stage.
LD LayersParams(const ModelShape& s) {
  return static_cast<LD>(s.n_layers) * MolStageParams(s).total;
}
double LayersActiveParams(const ModelShape& s) {
  return static_cast<double>(s.n_layers) * MolStageParams(s).active;
}
double LayersFlops(const ModelShape& s) {
  return static_cast<double>(s.n_layers) * MolStageFlops(s);
}

// 1 − k/(N − S): the fraction of the routed blocks a token skips.
double BlockSparsity(const ModelShape& s) {
  const int64_t routed = s.mol.blocks - s.mol.shared;
  return routed > 0 ? 1.0 - static_cast<double>(s.mol.top_k) / static_cast<double>(routed) : 0.0;
}

absl::Status ReadOptions(const nlohmann::json& object, JobFile* job) {
  JsonReader r(object, "mol.");
  MolShape& m = job->shape.mol;
  std::string mixer;
  r.Int("thin_width", &m.thin_width);
  r.Int("blocks", &m.blocks);
  r.Int("shared", &m.shared);
  r.Int("top_k", &m.top_k);
  r.String("routed_attention", &mixer);
  if (!r.status().ok()) return r.status();
  const auto fail = [](const char* field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("job: field 'mol.", field, "' ", why));
  };
  if (mixer != "gdn" && mixer != "softmax")
    return fail("routed_attention", "must be gdn or softmax");
  m.routed_deltanet = mixer == "gdn";
  const int64_t head_dim = HeadDim(job->shape);
  if (m.thin_width < 1 || head_dim < 1 || m.thin_width % head_dim != 0) {
    return fail("thin_width", absl::StrCat("must be a positive multiple of the head width ",
                                           head_dim, " (d_model / n_heads)"));
  }
  if (m.blocks < 2 || m.blocks > 1024) return fail("blocks", "must be between 2 and 1024");
  if (m.shared < 0 || m.shared >= m.blocks) {
    return fail("shared", "must be at least 0 and leave at least one routed block");
  }
  if (m.top_k < 1 || m.top_k > m.blocks - m.shared) {
    return fail("top_k",
                absl::StrCat("must be between 1 and the ", m.blocks - m.shared, " routed blocks"));
  }
  return absl::OkStatus();
}

nlohmann::json WriteOptions(const JobFile& job) {
  const MolShape& m = job.shape.mol;
  return nlohmann::json{{"thin_width", m.thin_width},
                        {"blocks", m.blocks},
                        {"shared", m.shared},
                        {"top_k", m.top_k},
                        {"routed_attention", m.routed_deltanet ? "gdn" : "softmax"}};
}

absl::Status CheckJob(const JobFile& job) {
  if (job.balance_coef < 0) {
    return absl::InvalidArgumentError("job: field 'balance_coef' must not be negative");
  }
  return absl::OkStatus();
}

}  // namespace

int64_t DeltaNetMixerParams(int64_t width, int64_t head_dim) {
  const int64_t heads = width / head_dim;
  return 5 * width * width + 2 * width * heads + 12 * width + 2 * heads + head_dim;
}

double DeltaNetMixerFlops(int64_t width, int64_t head_dim) {
  const double w = static_cast<double>(width), heads = w / static_cast<double>(head_dim);
  const double projections = 5.0 * w * w + 2.0 * w * heads;
  const double core = 7.0 * heads * static_cast<double>(head_dim * head_dim);
  return 2.0 * projections + 2.0 * 4.0 * 3.0 * w + core;
}

MolStageCount MolStageParams(const ModelShape& s) {
  const MolShape& m = s.mol;
  const LD shared = ThinBlockParams(s, false), routed = ThinBlockParams(s, m.routed_deltanet);
  const LD router = static_cast<LD>(s.d_model) * static_cast<LD>(m.blocks - m.shared);
  MolStageCount c;
  c.total =
      static_cast<LD>(m.shared) * shared + static_cast<LD>(m.blocks - m.shared) * routed + router;
  c.active = static_cast<double>(static_cast<LD>(m.shared) * shared +
                                 static_cast<LD>(m.top_k) * routed + router);
  return c;
}

double MolStageFlops(const ModelShape& s) {
  const MolShape& m = s.mol;
  const double t = static_cast<double>(m.thin_width), ctx = static_cast<double>(s.context);
  const int64_t routed_blocks = m.blocks - m.shared;
  const double f = routed_blocks > 0 ? static_cast<double>(m.top_k) / routed_blocks : 0.0;
  const double shared = ThinBlockFlops(s, false) + 4.0 * t * ctx;
  const double routed =
      ThinBlockFlops(s, m.routed_deltanet) + (m.routed_deltanet ? 0.0 : 4.0 * t * f * ctx);
  return static_cast<double>(m.shared) * shared + static_cast<double>(m.top_k) * routed +
         2.0 * static_cast<double>(s.d_model) * static_cast<double>(routed_blocks);
}

MolPaperCount MolPaperParams(int64_t d, int64_t thin, int64_t stages, int64_t blocks,
                             int64_t shared, int64_t top_k, int64_t vocab) {
  const int64_t block = 12 * thin * thin + 2 * d * thin;
  const int64_t router = d * (blocks - shared);
  MolPaperCount c;
  c.total = stages * (blocks * block + router);
  c.active = stages * ((shared + top_k) * block + router);
  c.embedding = vocab * d;
  return c;
}

FamilyTraits MolFamily() {
  FamilyTraits t;
  t.id = Family::kMol;
  t.name = "mol";
  t.recomputes = false;
  t.routing = RoutingKind::kLayers;
  t.layers_params = &LayersParams;
  t.layers_active_params = &LayersActiveParams;
  t.layers_flops = &LayersFlops;
  t.expert_sparsity = &BlockSparsity;
  t.check_job = &CheckJob;
  t.options_key = "mol";
  t.read_options = &ReadOptions;
  t.write_options = &WriteOptions;
  t.label = [](const RunFields& r) {
    return absl::StrFormat("MoL %d of %d routed", r.top_k, r.experts);
  };
  t.series = [](const RunFields& r) {
    return absl::StrFormat("MoL (top-%d of routed thin blocks)", r.top_k);
  };
  t.plot_rank = 5;
  return t;
}

}  // namespace xmod
