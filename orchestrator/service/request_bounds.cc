#include "orchestrator/service/request_bounds.h"

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_cat.h"

namespace xmod {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

absl::Status CheckString(const std::string& value, const std::string& path, const std::string& name,
                         const std::string& rpc) {
  const size_t limit = MaxStringBytes(name);
  if (value.size() <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(rpc, ": ", path, ": ", value.size(), " bytes, more than ", limit));
}

absl::Status Check(const Message& m, const std::string& prefix, const std::string& rpc) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string path = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
    if (f->type() == FieldDescriptor::TYPE_STRING || f->type() == FieldDescriptor::TYPE_BYTES) {
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(m, f); ++j) {
          std::string scratch;
          const std::string& v = r->GetRepeatedStringReference(m, f, j, &scratch);
          if (absl::Status s = CheckString(v, absl::StrCat(path, "[", j, "]"), f->name(), rpc);
              !s.ok()) {
            return s;
          }
        }
      } else {
        std::string scratch;
        if (absl::Status s =
                CheckString(r->GetStringReference(m, f, &scratch), path, f->name(), rpc);
            !s.ok()) {
          return s;
        }
      }
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(m, f); ++j) {
          const std::string item = prefix.empty()
                                       ? absl::StrCat(f->name(), "[", j, "]")
                                       : absl::StrCat(prefix, ".", f->name(), "[", j, "]");
          if (absl::Status s = Check(r->GetRepeatedMessage(m, f, j), item, rpc); !s.ok()) return s;
        }
      } else if (r->HasField(m, f)) {
        if (absl::Status s = Check(r->GetMessage(m, f), path, rpc); !s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t MaxStringBytes(const std::string& field) {
  if (field == "spec_yaml") return size_t{4} << 20;
  if (field == "message") return size_t{64} << 10;
  if (field == "source" || field == "path" || field == "resume_checkpoint" || field == "build") {
    return 4096;
  }
  return 256;
}

absl::Status CheckRequestBounds(const Message& request, const std::string& rpc) {
  return Check(request, "", rpc);
}

}  // namespace xmod
