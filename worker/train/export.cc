#include "worker/train/export.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/model.h"
#include "worker/train/checkpoint.h"
#include "worker/train/job_model.h"

namespace xmod {

namespace {

// safetensors' names for the dtypes a model holds; empty for others.
std::string DtypeName(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return "F32";
    case torch::kFloat64:
      return "F64";
    case torch::kFloat16:
      return "F16";
    case torch::kBFloat16:
      return "BF16";
    case torch::kInt64:
      return "I64";
    case torch::kInt32:
      return "I32";
    case torch::kInt16:
      return "I16";
    case torch::kInt8:
      return "I8";
    case torch::kUInt8:
      return "U8";
    case torch::kBool:
      return "BOOL";
    default:
      return "";
  }
}

}  // namespace

absl::Status WriteSafetensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata,
                              const std::string& path) {
  // The header, with offsets in the order given.
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  std::set<std::string> names;
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const std::string dtype = DtypeName(tensor.scalar_type());
    if (dtype.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' has dtype ",
                                                     c10::toString(tensor.scalar_type()),
                                                     ", which safetensors cannot hold"));
    }
    if (name == "__metadata__" || !names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor name '", name, "' repeated"));
    }
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const int64_t size = t.numel() * static_cast<int64_t>(t.element_size());
    header[name] = {
        {"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + size}}};
    offset += size;
    data.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat(tmp, ": cannot create"));
  uint64_t n = text.size();
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));
  bool ok = std::fwrite(length, 1, 8, f) == 8 && std::fwrite(text.data(), 1, n, f) == n;
  for (const torch::Tensor& t : data) {
    const size_t size = static_cast<size_t>(t.numel()) * t.element_size();
    ok = ok && (size == 0 || std::fwrite(t.data_ptr(), 1, size, f) == size);
  }
  ok = std::fclose(f) == 0 && ok;
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::filesystem::remove(tmp, ec);
    return absl::InternalError(absl::StrCat(path, ": write failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExportResult> ExportJob(const JobFile& job, const std::string& job_run_dir,
                                       const std::string& out_dir) {
  Decoder model(ModelOptionsFor(job));
  std::unique_ptr<torch::optim::AdamW> optimizer = MakeOptimizer(job, model->parameters());
  ASSIGN_OR_RETURN(LoadedCheckpoint loaded,
                   LoadLatestCheckpoint(job_run_dir, job.id, model, *optimizer));
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& p : model->named_parameters()) tensors.emplace_back(p.key(), p.value());
  for (const auto& b : model->named_buffers()) tensors.emplace_back(b.key(), b.value());

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(out_dir, ": ", ec.message()));
  ExportResult r;
  r.step = loaded.step;
  r.tensors = static_cast<int64_t>(tensors.size());
  r.weights = out_dir + "/model.safetensors";
  r.config = out_dir + "/config.json";
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"xmod_job_id", job.id},
                                                       {"step", std::to_string(loaded.step)},
                                                       {"checkpoint", loaded.path}};
  RETURN_IF_ERROR(WriteSafetensors(tensors, metadata, r.weights));
  r.bytes = static_cast<int64_t>(std::filesystem::file_size(r.weights, ec));

  const ModelShape& s = job.shape;
  nlohmann::ordered_json config = {{"model_type", "xmod"},
                                   {"family", std::string(FamilyName(s.family))},
                                   {"vocab_size", s.vocab_size},
                                   {"d_model", s.d_model},
                                   {"n_layers", s.n_layers},
                                   {"n_heads", s.n_heads},
                                   {"d_ff", s.d_ff},
                                   {"context", s.context},
                                   {"step", loaded.step},
                                   {"weights", "model.safetensors"},
                                   {"xmod_job", ToJson(job)}};
  const std::string tmp = r.config + ".tmp";
  {
    std::ofstream out(tmp);
    out << config.dump(2) << "\n";
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat(tmp, ": write failed"));
  }
  std::filesystem::rename(tmp, r.config, ec);
  if (ec) return absl::InternalError(absl::StrCat(r.config, ": ", ec.message()));
  return r;
}

}  // namespace xmod
