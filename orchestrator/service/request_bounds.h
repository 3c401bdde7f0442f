// Bounds on what a client may send: every string field of every request has a
// size limit (by field name, docs/protocol.md), and the server's receive limit is
// the largest legal request. The server checks each request before it acts on
// it, so a worker id or metric name of megabytes is refused, not stored.
#ifndef XMOD_ORCHESTRATOR_SERVICE_REQUEST_BOUNDS_H_
#define XMOD_ORCHESTRATOR_SERVICE_REQUEST_BOUNDS_H_

#include <google/protobuf/message.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace xmod {

// The largest request the server receives: a sweep file at its limit, or a
// metrics batch of 10,000 points with names at theirs, with room to spare.
inline constexpr int kMaxRequestBytes = 8 << 20;

// The most bytes a string field named `field` may hold: spec_yaml 4 MiB, message
// 64 KiB, paths (source, path, resume_checkpoint) 4,096, every other string
// (ids, names, hosts, checksums, sweep names) 256.
size_t MaxStringBytes(const std::string& field);

// OK, or INVALID_ARGUMENT "RPC: field.path: N bytes, more than M" for the first
// string over its limit, nested and repeated messages included.
absl::Status CheckRequestBounds(const google::protobuf::Message& request, const std::string& rpc);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SERVICE_REQUEST_BOUNDS_H_
