// The echo family on the worker side: dense layers (attention, SwiGLU), with the
// residual branches' output projections initialised for a model depth_factor
// times as deep, read from the job file's "echo" object.
#include <cstdlib>
#include <iostream>

#include "tests/plugins/echo_family.h"
#include "worker/model/family/family.h"
#include "worker/model/model.h"

namespace xmod::testing {

namespace {

std::shared_ptr<LayerImpl> Layer(const DecoderOptions& o, int64_t /*index*/) {
  Attention attention(o.d_model(), o.n_heads());
  Mlp mlp(o.d_model(), o.d_ff());
  return std::make_shared<LayerImpl>(Block(o.d_model(), attention.ptr(), mlp.ptr()), o.recompute());
}

double InitDepth(const DecoderOptions& o) {
  const nlohmann::json& options = o.family_options();
  TORCH_CHECK(options.is_object() && options.contains("depth_factor"),
              "echo: the job file has no echo.depth_factor");
  return options.at("depth_factor").get<double>() * static_cast<double>(o.n_layers());
}

std::vector<std::shared_ptr<AuxObjective>> NoObjectives(const DecoderOptions&, DecoderImpl&) {
  return {};
}

[[maybe_unused]] const bool kRegistered = [] {
  ModelFamily f{EchoFamily(), &Layer, &InitDepth, &NoObjectives, false, true, nullptr};
  if (absl::Status s = RegisterModelFamily(f); !s.ok()) {
    std::cerr << "echo family: " << s << "\n";
    std::abort();
  }
  return true;
}();

}  // namespace

}  // namespace xmod::testing
