// The dashboard's web files, embedded in the binary at build time
// (cmake/EmbedFiles.cmake from orchestrator/dashboard/web/), so that `xmod`
// serves its pages with nothing to install beside it and nothing loaded from
// outside the machine.
#ifndef XMOD_ORCHESTRATOR_DASHBOARD_ASSETS_H_
#define XMOD_ORCHESTRATOR_DASHBOARD_ASSETS_H_

#include <string>
#include <vector>

namespace xmod {

struct EmbeddedAsset {
  std::string path;   // as served, e.g. "/index.html"
  std::string bytes;  // the file's contents
};

const std::vector<EmbeddedAsset>& DashboardAssets();

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_DASHBOARD_ASSETS_H_
