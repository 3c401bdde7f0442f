// The worker side of a model family: how its decoder's layers are built, the
// depth its initial output projections are scaled by, and its auxiliary
// objectives. families.cc lists one row per family; the decoder and the trainer
// read nothing else about a family. A new family is a file beside dense.cc and
// a row in that table.
#ifndef XMOD_WORKER_MODEL_FAMILY_FAMILY_H_
#define XMOD_WORKER_MODEL_FAMILY_FAMILY_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/accounting.h"

namespace xmod {

struct DecoderOptions;
struct JobFile;
class DecoderImpl;
class LayerImpl;
class AuxObjective;

struct ModelFamily {
  Family id;
  // Layer `index` (0-based) of a decoder with `options`, its modules constructed
  // in the order that fixes the global generator's stream (and so the initial
  // weights): a block's mixers before the block, a routed layer's router after it.
  std::shared_ptr<LayerImpl> (*build_layer)(const DecoderOptions& options, int64_t index);
  // The depth D by which output projections of residual branches are scaled at
  // initialisation, std / sqrt(2 · D) (InitDepth in model.h).
  double (*init_depth)(const DecoderOptions& options);
  // The model's auxiliary objectives (aux.h), in the order their values are
  // named and reported. `model` is being built: its layers and rotary buffers
  // exist, so an objective may find its layers and register state on it.
  std::vector<std::shared_ptr<AuxObjective>> (*objectives)(const DecoderOptions& options,
                                                           DecoderImpl& model);
  // Training routes over whole sequences (top-k over positions), so evaluation
  // also runs causal threshold routing (val_loss_causal and the capacities).
  bool causal_eval;
  // Layers may recompute their blocks in the backward pass (DecoderOptions::
  // recompute). Not where channel mixers record losses: a recomputed block runs
  // without autograd, so they would carry no gradient.
  bool recompute;
  // Sets the family's own fields of `options` from its job file (its options
  // object, JobFile::family_options, or the typed view its job-file hook made of
  // it); the trainer sets the common ones. Null: nothing beyond them.
  void (*configure)(const JobFile& job, DecoderOptions* options) = nullptr;
};

// The row of `family`; TORCH_CHECK fails for a family without one (registered
// in common/ but not here), naming it.
const ModelFamily& ModelFamilyOf(Family family);
// Adds the worker side of a family registered with RegisterFamily (common/
// family.h); call at start-up, before any other thread reads the table. Fails
// when the family has a row already or a hook is missing.
absl::Status RegisterModelFamily(ModelFamily family);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_FAMILY_FAMILY_H_
