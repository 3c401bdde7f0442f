// mol: every layer is a Mixture-of-Layers split stage (mol_stage.h, docs/mol.md):
// S shared thin blocks with softmax attention and top-k of N − S routed thin blocks
// with Gated DeltaNet (or softmax), each behind its own projections; the CV²
// importance loss, weighted by the job's balance_coef (α), balances the routed blocks.
#include "worker/model/family/families.h"
#include "worker/model/mol_stage.h"

namespace xmod::family {

namespace {

// Sums each stage's CV² loss (averaged over the stages) and the tokens each routed
// block ran on; reports the loss and the realised load per block.
class MolObjective : public AuxObjective {
 public:
  explicit MolObjective(double balance_coef) : balance_coef_(balance_coef) {}
  void Collect(const AuxRecord& record, std::vector<AuxValue>* values) const override {
    const std::vector<torch::Tensor>& losses = record.Get(kMolBalanceLoss);
    torch::Tensor loss = record.Zero();
    for (const torch::Tensor& l : losses) loss = loss + l / static_cast<double>(losses.size());
    values->push_back({"balance_loss", loss, AuxKind::kLoss, balance_coef_});
    const std::vector<torch::Tensor>& load = record.Get(kMolBlockLoad);
    if (!load.empty()) values->push_back({"block_load", torch::stack(load), AuxKind::kCount});
  }
  void AfterStep(const StepTally& tally, std::vector<NamedValue>* report) override {
    report->push_back({"balance_loss", tally.Scalar("balance_loss")});
    const torch::Tensor load = tally.Get("block_load");  // [stages, N − S] tokens
    if (!load.defined()) return;
    const torch::Tensor l = load.cpu().to(torch::kFloat64);
    const torch::Tensor share = l / l.sum(1, true).clamp_min(1e-12);  // per stage, sums to 1
    // The busiest block's share against an even split (1 when balanced), the
    // stages' mean; and the least-used block's share, the smallest over stages.
    report->push_back({"block_load_spread", (share.amax(1) * l.size(1)).mean().item<double>()});
    report->push_back({"block_load_min", (share.amin(1) * l.size(1)).min().item<double>()});
  }

 private:
  double balance_coef_;
};

}  // namespace

std::shared_ptr<LayerImpl> MolLayer(const DecoderOptions& o, int64_t /*index*/) {
  const MolShape& m = o.mol();
  return std::make_shared<MolStageImpl>(
      MolStageOptions(o.d_model(), m.thin_width, o.d_model() / o.n_heads(), m.blocks, m.shared,
                      m.top_k)
          .routed_attention(m.routed_deltanet ? MolMixer::kDeltaNet : MolMixer::kSoftmax));
}

Objectives MolObjectives(const DecoderOptions& o, DecoderImpl& /*model*/) {
  return {std::make_shared<MolObjective>(o.balance_coef())};
}

void MolConfigure(const JobFile& job, DecoderOptions* o) { o->mol(job.shape.mol); }

}  // namespace xmod::family
