// Who may talk to the coordinator: the two checks the gRPC server and the
// dashboard's HTTP server share. A server listens without a token only on a
// loopback address, and a presented token is compared in constant time. No gRPC
// here, so an HTTP server can use them without the gRPC server's header.
#ifndef XMOD_ORCHESTRATOR_SERVICE_AUTH_H_
#define XMOD_ORCHESTRATOR_SERVICE_AUTH_H_

#include <string>

namespace xmod {

// True when the host of `listen` ("HOST:PORT", "[V6]:PORT") is 127.0.0.0/8,
// localhost or ::1: only this machine can connect.
bool IsLoopbackAddress(const std::string& listen);

// Whether `header`, a received authorization value, is exactly "Bearer TOKEN".
// The bytes are compared without an early exit, so the time taken does not say
// how much of the token was right (its length is not secret).
bool TokenMatches(const std::string& header, const std::string& token);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SERVICE_AUTH_H_
