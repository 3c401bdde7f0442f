#include "orchestrator/dashboard/http_server.h"

#include <httplib.h>
#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/id.h"
#include "common/status_macros.h"
#include "orchestrator/dashboard/api.h"
#include "orchestrator/dashboard/assets.h"
#include "orchestrator/service/auth.h"

namespace xmod {
namespace {

constexpr char kCookie[] = "xmod_token";

std::string ContentType(const std::string& path) {
  auto ends = [&](const char* suffix) {
    const std::string s(suffix);
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  // Not text/javascript: cpp-httplib compresses every text/* answer itself (brotli,
  // slowly), so scripts go out under this type, gzipped by us (see "/.*" below).
  if (ends(".js")) return "application/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".json")) return "application/json; charset=utf-8";
  return "application/octet-stream";
}

int HttpCode(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

void SendError(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json; charset=utf-8");
}

// `text` gzipped at level 1 (fast: a 10,000-job table is megabytes of JSON); empty
// when zlib fails.
std::string Gzip(const std::string& text) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return "";
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const bool done = deflate(&z, Z_FINISH) == Z_STREAM_END;
  out.resize(z.total_out);
  deflateEnd(&z);
  return done ? out : "";
}

// Sends `body` of `type` under `etag`: a 304 without a body when the client has
// that tag; else gzipped when the client takes gzip and `gzipped()` gives bytes
// (empty: send `body` as it is).
void SendTagged(const httplib::Request& req, httplib::Response& res, const std::string& etag,
                const std::string& type, const std::string& body,
                const std::function<std::string()>& gzipped) {
  res.set_header("ETag", etag);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("Vary", "Accept-Encoding");
  if (req.get_header_value("If-None-Match") == etag) {
    res.status = 304;
    return;
  }
  if (req.get_header_value("Accept-Encoding").find("gzip") != std::string::npos) {
    if (std::string gz = gzipped(); !gz.empty()) {
      res.set_header("Content-Encoding", "gzip");
      res.set_content(gz, type.c_str());
      return;
    }
  }
  res.set_content(body, type.c_str());
}

// One JSON endpoint. `answer` computes the body; INVALID_ARGUMENT (a missing or
// malformed parameter) is a 400 and NOT_FOUND a 404. `version`, when set, is the
// store's data version of what the answer shows (store_reader.h): it is read
// before the answer, so a tag never claims data newer than its body, and a
// client that already has the answer for this version gets a 304 without the
// answer being computed. Without `version` (or when it fails: a malformed
// request, an unknown sweep) the tag is a hash of the body.
struct JsonRoute {
  const char* path;
  std::function<absl::StatusOr<int64_t>(const httplib::Request&)> version;
  std::function<absl::StatusOr<nlohmann::json>(const httplib::Request&)> answer;
};

// The value of `name`, or INVALID_ARGUMENT saying what the endpoint needs.
absl::StatusOr<std::string> Param(const httplib::Request& req, const char* name) {
  if (!req.has_param(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.path, " needs ?", name, "=", std::string(name) == "id" ? "JOB" : "NAME"));
  }
  return req.get_param_value(name);
}

// A JSON answer with its ETag, gzipped here over 1 KB; the content type carries a
// charset, which keeps cpp-httplib from compressing it again with brotli at its
// slowest setting (seconds per megabyte: it stalled the 10,000-job page).
// `server` tells this process's tags from another's (a restarted or upgraded
// server has other answers for the same data).
void ServeJson(const JsonRoute& route, const std::string& server, const httplib::Request& req,
               httplib::Response& res) {
  std::string etag;
  if (route.version) {
    if (absl::StatusOr<int64_t> version = route.version(req); version.ok()) {
      etag = absl::StrCat("\"", HexId(req.target), "-", *version, "-", server, "\"");
      if (req.get_header_value("If-None-Match") == etag) {
        SendTagged(req, res, etag, "", "", [] { return std::string(); });
        return;
      }
    }
  }
  const absl::StatusOr<nlohmann::json> body = route.answer(req);
  if (!body.ok()) {
    SendError(res, HttpCode(body.status()), std::string(body.status().message()));
    return;
  }
  const std::string text = body->dump();
  if (etag.empty()) etag = absl::StrCat("\"", HexId(text), "\"");
  SendTagged(req, res, etag, "application/json; charset=utf-8", text,
             [&text] { return text.size() > 1024 ? Gzip(text) : std::string(); });
}

// The JSON endpoints of api.h (docs/dashboard.md). /api/sweeps has no version:
// its elapsed times and ETAs move with the clock.
std::vector<JsonRoute> JsonRoutes(StoreReader* store, Scheduler* scheduler) {
  const auto sweep_version = [store](const httplib::Request& req) -> absl::StatusOr<int64_t> {
    ASSIGN_OR_RETURN(std::string sweep, Param(req, "sweep"));
    return store->SweepDataVersion(sweep);
  };
  return {
      {"/api/sweeps", nullptr,
       [store, scheduler](const httplib::Request&) {
         return SweepsJson(store, scheduler, store->Now());
       }},
      {"/api/jobs", sweep_version,
       [store, scheduler](const httplib::Request& req) -> absl::StatusOr<nlohmann::json> {
         ASSIGN_OR_RETURN(std::string sweep, Param(req, "sweep"));
         return JobsJson(store, scheduler, sweep);
       }},
      {"/api/job",
       [store](const httplib::Request& req) -> absl::StatusOr<int64_t> {
         ASSIGN_OR_RETURN(std::string job, Param(req, "id"));
         return store->JobDataVersion(job);
       },
       [store](const httplib::Request& req) -> absl::StatusOr<nlohmann::json> {
         ASSIGN_OR_RETURN(std::string job, Param(req, "id"));
         return JobJson(store, job);
       }},
      {"/api/curves",
       [store, sweep_version](const httplib::Request& req) -> absl::StatusOr<int64_t> {
         if (req.has_param("job")) return store->JobDataVersion(req.get_param_value("job"));
         return sweep_version(req);
       },
       [store](const httplib::Request& req) -> absl::StatusOr<nlohmann::json> {
         const bool by_job = req.has_param("job"), by_sweep = req.has_param("sweep");
         if (by_job == by_sweep) {
           return absl::InvalidArgumentError("/api/curves needs one of ?job=JOB and ?sweep=NAME");
         }
         // A whole sweep's curves come thinner by default: hundreds of them share a page.
         int64_t max_points = by_job ? 2000 : 200;
         if (req.has_param("max_points") &&
             !absl::SimpleAtoi(req.get_param_value("max_points"), &max_points)) {
           return absl::InvalidArgumentError("max_points: expected an integer");
         }
         return by_job ? CurvesJson(store, req.get_param_value("job"), max_points)
                       : SweepCurvesJson(store, req.get_param_value("sweep"), max_points);
       }},
      {"/api/compare", sweep_version,
       [store](const httplib::Request& req) -> absl::StatusOr<nlohmann::json> {
         ASSIGN_OR_RETURN(std::string sweep, Param(req, "sweep"));
         return CompareJson(store, sweep);
       }},
      {"/api/advise", sweep_version,
       [store](const httplib::Request& req) -> absl::StatusOr<nlohmann::json> {
         ASSIGN_OR_RETURN(std::string sweep, Param(req, "sweep"));
         double compute = 0, context = 0;
         int bootstrap = 100;
         for (auto [name, value] :
              {std::pair<const char*, double*>{"compute", &compute}, {"context", &context}}) {
           if (req.has_param(name) &&
               (!absl::SimpleAtod(req.get_param_value(name), value) || !(*value > 0))) {
             return absl::InvalidArgumentError(absl::StrCat(name, ": expected a positive number"));
           }
         }
         int calibrate = 0;
         for (auto [name, value] :
              {std::pair<const char*, int*>{"bootstrap", &bootstrap}, {"calibrate", &calibrate}}) {
           if (req.has_param(name) && !absl::SimpleAtoi(req.get_param_value(name), value)) {
             return absl::InvalidArgumentError(absl::StrCat(name, ": expected an integer"));
           }
         }
         return AdviseJson(store, sweep, compute, context, bootstrap,
                           req.get_param_value("extrapolate") == "1", calibrate);
       }},
      {"/api/fits", sweep_version,
       [store](const httplib::Request& req) -> absl::StatusOr<nlohmann::json> {
         ASSIGN_OR_RETURN(std::string sweep, Param(req, "sweep"));
         return FitsJson(store, sweep);
       }},
  };
}

std::string CookieValue(const std::string& header, const std::string& name) {
  size_t at = 0;
  while (at < header.size()) {
    size_t end = header.find(';', at);
    if (end == std::string::npos) end = header.size();
    std::string part = header.substr(at, end - at);
    const size_t first = part.find_first_not_of(' ');
    part = first == std::string::npos ? std::string() : part.substr(first);
    if (part.rfind(name + "=", 0) == 0) return part.substr(name.size() + 1);
    at = end + 1;
  }
  return "";
}

// HOST and PORT of "HOST:PORT" ("[::1]:8080" gives ::1); INVALID_ARGUMENT otherwise.
absl::StatusOr<std::pair<std::string, int>> ParseListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535 || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http ", listen, ": expected HOST:PORT (e.g. 127.0.0.1:8080)"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

// The token gate, before any route: the header or the login cookie. No gate
// without a token.
void InstallTokenGate(httplib::Server& s, const std::string& token) {
  s.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
    if (token.empty() || req.path == "/login") return httplib::Server::HandlerResponse::Unhandled;
    const std::string header = req.get_header_value("Authorization");
    const std::string cookie = CookieValue(req.get_header_value("Cookie"), kCookie);
    // Both comparisons always run, each in constant time.
    const bool by_header = TokenMatches(header, token);
    const bool by_cookie = TokenMatches(absl::StrCat("Bearer ", cookie), token);
    if (by_header || by_cookie) return httplib::Server::HandlerResponse::Unhandled;
    SendError(res, 401,
              "this dashboard needs the operator token: open /login?token=TOKEN "
              "once, or send "
              "Authorization: Bearer TOKEN");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/login", [token](const httplib::Request& req, httplib::Response& res) {
    const std::string given = req.get_param_value("token");
    if (token.empty()) {
      res.set_redirect("/");
      return;
    }
    if (!TokenMatches(absl::StrCat("Bearer ", given), token)) {
      SendError(res, 401, "wrong token");
      return;
    }
    res.set_header("Set-Cookie",
                   absl::StrCat(kCookie, "=", given, "; Path=/; HttpOnly; SameSite=Strict"));
    res.set_redirect("/");
  });
}

// The pages: the embedded files ("/" is index.html), with an ETag so that a
// reload costs a 304. The scripts (the chart bundle: 53 KB) are gzipped once
// here and sent so to clients that take gzip; cpp-httplib would otherwise
// brotli them on every request at its slowest setting (a quarter of a second).
// It still compresses the small text/* files (HTML, CSS) itself, so those go
// out as they are.
void InstallPages(httplib::Server& s) {
  struct Served {
    std::string bytes, gzipped, etag, type;
  };
  auto served = std::make_shared<std::map<std::string, Served>>();
  for (const EmbeddedAsset& a : DashboardAssets()) {
    const std::string type = ContentType(a.path);
    (*served)[a.path] = {a.bytes, type.rfind("text/", 0) == 0 ? "" : Gzip(a.bytes),
                         absl::StrCat("\"", HexId(a.bytes), "\""), type};
  }
  s.Get("/.*", [served](const httplib::Request& req, httplib::Response& res) {
    auto it = served->find(req.path == "/" ? "/index.html" : req.path);
    if (it == served->end()) return SendError(res, 404, absl::StrCat("no page ", req.path));
    const Served& a = it->second;
    SendTagged(req, res, a.etag, a.type, a.bytes, [&a] { return a.gzipped; });
  });
}

// Read-only: no method but GET (and HEAD) does anything; an exception in a
// handler is a 500 that says what it was.
void InstallRefusals(httplib::Server& s) {
  const auto refuse = [](const httplib::Request& req, httplib::Response& res) {
    SendError(res, 405, absl::StrCat(req.method, " is not allowed: the dashboard is read-only"));
  };
  s.Post(".*", refuse);
  s.Put(".*", refuse);
  s.Patch(".*", refuse);
  s.Delete(".*", refuse);
  s.Options(".*", refuse);
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        SendError(res, 500, what);
      });
}

}  // namespace

absl::StatusOr<std::unique_ptr<DashboardServer>> DashboardServer::Start(StoreReader* store,
                                                                        Scheduler* scheduler,
                                                                        DashboardOptions options) {
  ASSIGN_OR_RETURN(auto listen, ParseListen(options.listen));
  auto [host, port] = std::move(listen);
  if (!IsLoopbackAddress(options.listen) && options.token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http ", options.listen,
                     ": not a loopback address, so the dashboard needs an operator token "
                     "(--token-file); or listen on 127.0.0.1 and tunnel"));
  }
  std::unique_ptr<DashboardServer> d(new DashboardServer());
  d->server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *d->server_;
  InstallTokenGate(s, options.token);
  // This process's part of the JSON answers' tags.
  const std::string server_tag =
      HexId(absl::StrCat(std::random_device{}(), "-", std::random_device{}(), "-", store->Now()));
  for (JsonRoute& route : JsonRoutes(store, scheduler)) {
    s.Get(route.path, [route = std::move(route), server_tag](const httplib::Request& req,
                                                             httplib::Response& res) {
      ServeJson(route, server_tag, req, res);
    });
  }
  InstallPages(s);
  InstallRefusals(s);

  if (port == 0) {
    port = s.bind_to_any_port(host);
    if (port < 0) port = -1;
  } else if (!s.bind_to_port(host, port)) {
    port = -1;
  }
  if (port < 0) {
    return absl::UnavailableError(
        absl::StrCat("--http ", options.listen, ": could not bind (in use, or no such address)"));
  }
  d->host_ = host;
  d->port_ = port;
  DashboardServer* raw = d.get();
  d->thread_ = std::thread([raw] {
    raw->server_->listen_after_bind();
    raw->listening_done_ = true;
  });
  return d;
}

std::string DashboardServer::address() const {
  return host_.find(':') != std::string::npos ? absl::StrCat("[", host_, "]:", port_)
                                              : absl::StrCat(host_, ":", port_);
}

DashboardServer::~DashboardServer() {
  // httplib's stop() does nothing before the loop runs, so wait for it to start
  // (or to have given up) first.
  while (server_ && !server_->is_running() && !listening_done_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace xmod
