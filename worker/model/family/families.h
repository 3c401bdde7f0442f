// What each family file defines for the table in families.cc, and the pieces
// the families share. Included by family/*.cc only.
#ifndef XMOD_WORKER_MODEL_FAMILY_FAMILIES_H_
#define XMOD_WORKER_MODEL_FAMILY_FAMILIES_H_

#include <memory>
#include <vector>

#include "common/job_file.h"
#include "worker/model/model.h"

namespace xmod::family {

using Objectives = std::vector<std::shared_ptr<AuxObjective>>;

// dense.cc: the dense block (attention and SwiGLU) and the plain layer around
// it, which every family builds for the layers it does not route or give experts.
Block DenseBlock(const DecoderOptions& options);
std::shared_ptr<LayerImpl> DenseLayer(const DecoderOptions& options, int64_t index);
// Every layer counts 1.
double LayerCountDepth(const DecoderOptions& options);
Objectives NoObjectives(const DecoderOptions& options, DecoderImpl& model);

// xmod.cc, shared with mod.cc: whether layer `index` is routed (every layer but
// the anchors, one per `stride`).
bool IsRoutedLayer(const DecoderOptions& options, int64_t index);
std::shared_ptr<LayerImpl> XmodLayer(const DecoderOptions& options, int64_t index);
double XmodInitDepth(const DecoderOptions& options);
Objectives XmodObjectives(const DecoderOptions& options, DecoderImpl& model);

// mod.cc
std::shared_ptr<LayerImpl> ModLayer(const DecoderOptions& options, int64_t index);
Objectives ModObjectives(const DecoderOptions& options, DecoderImpl& model);

// moe.cc
std::shared_ptr<LayerImpl> MoeLayer(const DecoderOptions& options, int64_t index);
Objectives MoeObjectives(const DecoderOptions& options, DecoderImpl& model);
void MoeConfigure(const JobFile& job, DecoderOptions* options);

// deco.cc
std::shared_ptr<LayerImpl> DecoLayer(const DecoderOptions& options, int64_t index);
Objectives DecoObjectives(const DecoderOptions& options, DecoderImpl& model);
void DecoConfigure(const JobFile& job, DecoderOptions* options);

// mol.cc
std::shared_ptr<LayerImpl> MolLayer(const DecoderOptions& options, int64_t index);
Objectives MolObjectives(const DecoderOptions& options, DecoderImpl& model);
void MolConfigure(const JobFile& job, DecoderOptions* options);

// gdn.cc
std::shared_ptr<LayerImpl> GdnLayer(const DecoderOptions& options, int64_t index);
void GdnConfigure(const JobFile& job, DecoderOptions* options);

}  // namespace xmod::family

#endif  // XMOD_WORKER_MODEL_FAMILY_FAMILIES_H_
