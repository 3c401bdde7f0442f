#include "worker/train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/id.h"
#include "common/status_macros.h"

namespace xmod {

namespace fs = std::filesystem;

absl::StatusOr<std::string> FileChecksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return HexId(buffer.str());
}

std::string CheckpointDir(const std::string& run_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return run_dir + "/checkpoints/" + name;
}

namespace {

// Complete checkpoint folders, newest first.
std::vector<std::pair<int64_t, std::string>> Complete(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir + "/checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.size() != 13) continue;  // skips "*.tmp"
    found.emplace_back(std::stoll(name.substr(5)), entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& run_dir, const std::string& job_id, int64_t step,
                            Decoder& model, torch::optim::Optimizer& optimizer, int keep,
                            int64_t protect_step, const std::vector<int64_t>& keep_steps) {
  const std::string final_dir = CheckpointDir(run_dir, step);
  const std::string tmp = final_dir + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp, ": ", ec.message()));
  try {
    torch::save(model, tmp + "/model.pt");
    torch::save(optimizer, tmp + "/optimizer.pt");
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(tmp, ": saving failed: ", e.what_without_backtrace()));
  }
  nlohmann::json meta = {{"step", step}, {"job_id", job_id}};
  for (const char* file : {"model.pt", "optimizer.pt"}) {
    ASSIGN_OR_RETURN(std::string sum, FileChecksum(tmp + "/" + file));
    meta["checksums"][file] = sum;
  }
  {
    std::ofstream out(tmp + "/meta.json");
    out << meta.dump(2) << "\n";
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat(tmp, "/meta.json: write failed"));
  }
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(final_dir, ": rename failed: ", ec.message()));
  const auto all = Complete(run_dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < all.size(); ++i) {
    const int64_t s = all[i].first;
    if (s == protect_step ||
        std::find(keep_steps.begin(), keep_steps.end(), s) != keep_steps.end()) {
      continue;
    }
    fs::remove_all(all[i].second, ec);
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedCheckpoint> LoadLatestCheckpoint(const std::string& run_dir,
                                                      const std::string& job_id, Decoder& model,
                                                      torch::optim::Optimizer& optimizer,
                                                      int64_t max_step) {
  LoadedCheckpoint loaded;
  for (const auto& [step, dir] : Complete(run_dir)) {
    if (max_step >= 0 && step > max_step) continue;
    std::ifstream in(dir + "/meta.json");
    nlohmann::json meta;
    try {
      meta = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception&) {
      loaded.skipped.push_back(dir + ": unreadable meta.json");
      continue;
    }
    if (meta.value("job_id", std::string()) != job_id) {
      loaded.skipped.push_back(dir + ": belongs to job " + meta.value("job_id", std::string("?")));
      continue;
    }
    bool intact = true;
    for (const char* file : {"model.pt", "optimizer.pt"}) {
      auto sum = FileChecksum(dir + "/" + file);
      if (!sum.ok() || *sum != meta["checksums"].value(file, std::string())) {
        loaded.skipped.push_back(absl::StrCat(dir, "/", file, ": checksum mismatch"));
        intact = false;
        break;
      }
    }
    if (!intact) continue;
    try {
      torch::load(model, dir + "/model.pt");
      torch::load(optimizer, dir + "/optimizer.pt");
    } catch (const c10::Error& e) {
      loaded.skipped.push_back(absl::StrCat(dir, ": ", e.what_without_backtrace()));
      continue;
    }
    loaded.step = step;
    loaded.path = dir;
    return loaded;
  }
  std::string why;
  for (const std::string& s : loaded.skipped) why += "; " + s;
  return absl::NotFoundError(absl::StrCat(
      run_dir, ": no usable checkpoint",
      max_step >= 0 ? absl::StrCat(" up to step ", max_step) : "", " for job ", job_id, why));
}

}  // namespace xmod
