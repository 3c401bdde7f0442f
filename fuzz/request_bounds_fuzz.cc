// libFuzzer target: the RPC validation layer. The first byte picks a request type,
// the rest is parsed as that message's wire format; the bounds check answers OK
// or INVALID_ARGUMENT naming the RPC, never anything else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "orchestrator/service/request_bounds.h"
#include "xmod/v1/coordinator.pb.h"

namespace pb = ::xmod::v1;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::unique_ptr<google::protobuf::Message> request;
  switch (data[0] % 8) {
    case 0:
      request = std::make_unique<pb::SubmitSweepRequest>();
      break;
    case 1:
      request = std::make_unique<pb::RegisterWorkerRequest>();
      break;
    case 2:
      request = std::make_unique<pb::LeaseJobRequest>();
      break;
    case 3:
      request = std::make_unique<pb::HeartbeatRequest>();
      break;
    case 4:
      request = std::make_unique<pb::ReportMetricsRequest>();
      break;
    case 5:
      request = std::make_unique<pb::ReportCheckpointRequest>();
      break;
    case 6:
      request = std::make_unique<pb::FailJobRequest>();
      break;
    default:
      request = std::make_unique<pb::CancelRequest>();
      break;
  }
  if (!request->ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  const absl::Status s = xmod::CheckRequestBounds(*request, "Fuzz");
  if (!s.ok() && s.code() != absl::StatusCode::kInvalidArgument) std::abort();
  return 0;
}
