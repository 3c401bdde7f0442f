// Typed reads of one JSON object of a job file that never throw: the first
// error is kept ("job: field 'PREFIXkey' ...") and every later read is skipped.
// The job file (job_file.cc) and the families reading their options object
// (common/families/) use it.
#ifndef XMOD_COMMON_JSON_READER_H_
#define XMOD_COMMON_JSON_READER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace xmod {

class JsonReader {
 public:
  JsonReader(const nlohmann::json& object, std::string prefix)
      : object_(object), prefix_(std::move(prefix)) {}

  void Int(const char* key, int64_t* out, bool required = true) {
    const nlohmann::json* v = Find(key, required);
    if (v == nullptr) return;
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) {
      Fail(key, "does not fit a signed 64-bit integer");
    } else if (!v->is_number_integer()) {
      Fail(key, "must be an integer");
    } else {
      *out = v->get<int64_t>();
    }
  }
  void Unsigned(const char* key, uint64_t* out) {
    const nlohmann::json* v = Find(key, true);
    if (v == nullptr) return;
    if (v->is_number_unsigned()) {
      *out = v->get<uint64_t>();
    } else if (v->is_number_integer()) {
      if (v->get<int64_t>() < 0) Fail(key, "must not be negative");
      if (v->get<int64_t>() >= 0) *out = static_cast<uint64_t>(v->get<int64_t>());
    } else {
      Fail(key, "must be a non-negative integer");
    }
  }
  void Real(const char* key, double* out, bool required = true) {
    const nlohmann::json* v = Find(key, required);
    if (v == nullptr) return;
    if (!v->is_number()) {
      Fail(key, "must be a number");
    } else {
      *out = v->get<double>();
    }
  }
  void String(const char* key, std::string* out, bool required = true) {
    const nlohmann::json* v = Find(key, required);
    if (v == nullptr) return;
    if (!v->is_string()) {
      Fail(key, "must be a string");
    } else {
      *out = v->get<std::string>();
    }
  }
  void Bool(const char* key, bool* out) {
    const nlohmann::json* v = Find(key, false);
    if (v == nullptr) return;
    if (!v->is_boolean()) {
      Fail(key, "must be true or false");
    } else {
      *out = v->get<bool>();
    }
  }
  // Present and not null.
  bool Has(const char* key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }
  void Fail(const char* key, const std::string& why) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat("job: field '", prefix_, key, "' ", why));
    }
  }
  const absl::Status& status() const { return status_; }

 private:
  const nlohmann::json* Find(const char* key, bool required) {
    if (!status_.ok()) return nullptr;
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      if (required) Fail(key, "is missing");
      return nullptr;
    }
    return &*it;
  }

  const nlohmann::json& object_;
  std::string prefix_;
  absl::Status status_;
};

}  // namespace xmod

#endif  // XMOD_COMMON_JSON_READER_H_
