#include "worker/train/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/status_macros.h"

namespace xmod {

namespace fs = std::filesystem;

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
    if (name.rfind("step_", 0) != 0 || name.size() != 13) continue;  // skips "*.tmp-*", "*.old-*"
    found.emplace_back(std::stoll(name.substr(5)), entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

// The fencing token in a checkpoint folder's meta.json; 0 when it has none (a run
// without a coordinator, or a folder from before tokens were recorded) or when
// the file cannot be read.
int64_t WriterToken(const std::string& dir) {
  std::ifstream in(dir + "/meta.json");
  if (!in) return 0;
  try {
    const nlohmann::json meta = nlohmann::json::parse(in);
    return meta.value("fencing_token", int64_t{0});
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
}

// A folder beside the checkpoints that a writer left or set aside:
// "step_N.tmp-T" (T: its writer's token), "step_N.old-T-K" (T: the token of the
// writer that set it aside) or "step_N.tmp" (before tokens). Returns T (0 for the
// last), or -1 for any other name.
int64_t LeftoverToken(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() < 17 || name[13] != '.') return -1;
  const std::string kind = name.substr(14, 3);
  if (kind != "tmp" && kind != "old") return -1;
  if (name.size() == 17) return kind == "tmp" ? 0 : -1;
  if (name[17] != '-') return -1;
  int64_t t = 0;
  size_t i = 18;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) {
    if (t > (INT64_MAX - 9) / 10) return -1;
    t = t * 10 + (name[i] - '0');
  }
  return i > 18 ? t : -1;
}

// A file written through a std::ostream whose bytes are hashed on their way to
// the disk: the checksum costs no second pass over the file and no copy of it.
class HashingFile : public std::streambuf {
 public:
  explicit HashingFile(const std::string& path)
      : path_(path), file_(std::fopen(path.c_str(), "wb")), buffer_(size_t{1} << 20) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }
  ~HashingFile() override {
    if (file_ != nullptr) std::fclose(file_);
  }
  HashingFile(const HashingFile&) = delete;
  HashingFile& operator=(const HashingFile&) = delete;

  bool is_open() const { return file_ != nullptr; }
  // Writes what is buffered and closes the file; the checksum of every byte.
  absl::StatusOr<std::string> Close() {
    const bool flushed = Drain();
    const bool closed = file_ != nullptr && std::fclose(file_) == 0;
    file_ = nullptr;
    if (!flushed || !closed || failed_) {
      return absl::InternalError(absl::StrCat(path_, ": write failed"));
    }
    return sum_.Hex();
  }

 protected:
  int overflow(int c) override {
    if (!Drain()) return traits_type::eof();
    if (c != traits_type::eof()) {
      *pptr() = static_cast<char>(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    // A large piece (a tensor's storage) goes straight to the file.
    if (n >= static_cast<std::streamsize>(buffer_.size())) {
      if (!Drain() || !Put(s, static_cast<size_t>(n))) return 0;
      return n;
    }
    return std::streambuf::xsputn(s, n);
  }
  int sync() override { return Drain() ? 0 : -1; }

 private:
  bool Put(const char* data, size_t size) {
    sum_.Update(data, size);
    if (file_ == nullptr || std::fwrite(data, 1, size, file_) != size) failed_ = true;
    return !failed_;
  }
  bool Drain() {
    const size_t n = static_cast<size_t>(pptr() - pbase());
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return n == 0 ? !failed_ : Put(buffer_.data(), n);
  }

  std::string path_;
  std::FILE* file_;
  std::vector<char> buffer_;
  StreamChecksum sum_;
  bool failed_ = false;
};

// Serialises `value` (a module or an optimizer) to `path`; its checksum.
template <typename Value>
absl::StatusOr<std::string> SaveHashed(const Value& value, const std::string& path) {
  HashingFile file(path);
  if (!file.is_open()) return absl::InternalError(absl::StrCat(path, ": cannot create"));
  std::ostream out(&file);
  torch::save(value, out);
  out.flush();
  return file.Close();
}

absl::Status Abandoned(const std::string& dir, const std::string& why) {
  return absl::AbortedError(absl::StrCat(dir, ": not published: ", why));
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& run_dir, const std::string& job_id, int64_t step,
                            Decoder& model, torch::optim::Optimizer& optimizer,
                            const CheckpointWrite& write) {
  const std::string final_dir = CheckpointDir(run_dir, step);
  // This writer's own temporary folder: another group that still believes it
  // holds the job writes a different one.
  const std::string tmp = absl::StrCat(final_dir, ".tmp-", write.token);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp, ": ", ec.message()));
  // Each file is written once, by this rank, and hashed as it is written.
  nlohmann::json meta = {{"step", step},
                         {"job_id", job_id},
                         {"fencing_token", write.token},
                         {"checksum", std::string(kChecksumAlgorithm)}};
  try {
    ASSIGN_OR_RETURN(meta["checksums"]["model.pt"], SaveHashed(model, tmp + "/model.pt"));
    ASSIGN_OR_RETURN(meta["checksums"]["optimizer.pt"],
                     SaveHashed(optimizer, tmp + "/optimizer.pt"));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(tmp, ": saving failed: ", e.what_without_backtrace()));
  }
  {
    std::ofstream out(tmp + "/meta.json");
    out << meta.dump(2) << "\n";
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat(tmp, "/meta.json: write failed"));
  }
  if (write.written) write.written();
  if (write.may_publish && !write.may_publish()) {
    fs::remove_all(tmp, ec);
    return Abandoned(final_dir, "this group no longer holds the job");
  }
  // rename(2) never replaces a non-empty folder, so a published checkpoint is
  // only ever replaced here, after its writer's token has been compared: an
  // older attempt's folder (a holder that lost its lease, or a crashed attempt)
  // is set aside and removed; a newer one's means this writer is the stale one.
  for (int k = 0;; ++k) {
    fs::rename(tmp, final_dir, ec);
    if (!ec) break;
    if (!fs::exists(final_dir) || k == 8) {
      const std::string why = ec.message();
      fs::remove_all(tmp, ec);
      return absl::InternalError(absl::StrCat(final_dir, ": rename failed: ", why));
    }
    const int64_t there = WriterToken(final_dir);
    if (there > write.token) {
      fs::remove_all(tmp, ec);
      return Abandoned(final_dir,
                       absl::StrCat("a later attempt (fencing token ", there,
                                    ") published this step; this one's is ", write.token));
    }
    const std::string aside = absl::StrCat(final_dir, ".old-", write.token, "-", k);
    fs::rename(final_dir, aside, ec);
    fs::remove_all(aside, ec);
  }
  return absl::OkStatus();
}

void PruneCheckpoints(const std::string& run_dir, int keep, int64_t protect_step,
                      const std::vector<int64_t>& keep_steps, int64_t token) {
  std::error_code ec;
  const auto all = Complete(run_dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < all.size(); ++i) {
    const int64_t s = all[i].first;
    if (s == protect_step ||
        std::find(keep_steps.begin(), keep_steps.end(), s) != keep_steps.end() ||
        WriterToken(all[i].second) > token) {
      continue;
    }
    fs::remove_all(all[i].second, ec);
  }
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(run_dir + "/checkpoints", ec)) {
    const int64_t t = LeftoverToken(entry.path().filename().string());
    if (t >= 0 && t < token) leftovers.push_back(entry.path());
  }
  for (const fs::path& p : leftovers) fs::remove_all(p, ec);
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
    // Verified in blocks before LibTorch reads the file: XXH3, or FNV-1a for a
    // checkpoint written before xmod recorded the algorithm.
    const std::string algorithm = meta.value("checksum", std::string("fnv1a-64"));
    if (algorithm != kChecksumAlgorithm && algorithm != "fnv1a-64") {
      loaded.skipped.push_back(absl::StrCat(dir, ": unknown checksum '", algorithm, "'"));
      continue;
    }
    bool intact = true;
    for (const char* file : {"model.pt", "optimizer.pt"}) {
      const std::string path = dir + "/" + file;
      auto sum = algorithm == kChecksumAlgorithm ? FileChecksum(path) : LegacyFileChecksum(path);
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
