// Plug-ins that live in the tests only: a law registered from here (repeat_law.h)
// is fitted through the real `xmod fit --csv` command, with nothing in xmod's own
// files changed for it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "orchestrator/cli/commands.h"
#include "orchestrator/fit/make_law.h"
#include "tests/plugins/repeat_law.h"

namespace xmod {
namespace {

// Runs `xmod ARGS...` in this process; the exit code, stdout into `out`, stderr into `err`.
int Xmod(std::vector<std::string> args, std::string* out, std::string* err) {
  args.insert(args.begin(), "xmod");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream o, e;
  const int code = RunXmod(static_cast<int>(argv.size()), argv.data(), o, e);
  *out = o.str();
  *err = e.str();
  return code;
}

class LawPlugin : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(RegisterLaw(MakeLawSpec<testing::RepeatLaw>()).ok()); }
  // Losses from the law itself at A = 400, E = 1.7, alpha = 0.3, rho = 0.05, with
  // a small deterministic wobble (±0.2%) so the fit has residuals to minimise.
  static std::string WriteCsv(const std::string& name, bool with_epochs) {
    const std::string path = (std::filesystem::temp_directory_path() / name).string();
    std::ofstream f(path);
    f << (with_epochs ? "N,D,epochs,loss\n" : "N,D,loss\n");
    int k = 0;
    for (double n : {1e6, 3e6, 1e7, 3e7, 1e8}) {
      for (double r : {1.0, 2.0, 4.0, 8.0}) {
        const double loss =
            (1.7 + 400.0 * std::pow(n, -0.3) * std::pow(r, 0.05)) * (1.0 + 0.002 * ((k++ % 3) - 1));
        f << n << "," << 20 * n << ",";
        if (with_epochs) f << r << ",";
        f << loss << "\n";
      }
    }
    return path;
  }
};

TEST_F(LawPlugin, ATestLawIsOfferedAndFittedThroughXmodFitCsv) {
  std::string out, err;
  ASSERT_EQ(Xmod({"fit", "--csv", WriteCsv("xmod_repeat.csv", true), "--law", "repeat", "--format",
                  "json", "--threads", "1"},
                 &out, &err),
            0)
      << err;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("law"), "repeat");
  EXPECT_EQ(j.at("n_points"), 20);
  const nlohmann::json& p = j.at("params");
  EXPECT_NEAR(p.at("alpha").get<double>(), 0.3, 0.02);
  EXPECT_NEAR(p.at("rho").get<double>(), 0.05, 0.01);
  EXPECT_NEAR(p.at("E").get<double>(), 1.7, 0.05);
  EXPECT_LT(j.at("rmse").get<double>(), 0.005);
  // The human table names the law's own parameters.
  ASSERT_EQ(
      Xmod({"fit", "--csv", WriteCsv("xmod_repeat.csv", true), "--law", "repeat", "--threads", "1"},
           &out, &err),
      0)
      << err;
  EXPECT_NE(out.find("law repeat"), std::string::npos) << out;
  EXPECT_NE(out.find("rho"), std::string::npos) << out;
}

TEST_F(LawPlugin, ItsColumnsChecksAndFrozenParametersComeFromItsHeader) {
  std::string out, err;
  const std::string no_epochs = WriteCsv("xmod_repeat_short.csv", false);
  EXPECT_EQ(Xmod({"fit", "--csv", no_epochs, "--law", "repeat"}, &out, &err), 2);
  EXPECT_NE(err.find(no_epochs + ":1: header: missing column 'epochs' (law repeat needs "
                                 "N,D,epochs,loss)"),
            std::string::npos)
      << err;
  // --fix in reported units (rho is not log-scaled), honoured exactly.
  ASSERT_EQ(Xmod({"fit", "--csv", WriteCsv("xmod_repeat.csv", true), "--law", "repeat", "--fix",
                  "rho=0", "--format", "json", "--threads", "1"},
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(nlohmann::json::parse(out).at("params").at("rho").get<double>(), 0.0);
  EXPECT_EQ(
      Xmod({"fit", "--csv", WriteCsv("xmod_repeat.csv", true), "--law", "repeat", "--fix", "eta=1"},
           &out, &err),
      2);
  EXPECT_NE(err.find("law repeat has no parameter 'eta' (known: A, E, alpha, rho)"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace xmod
