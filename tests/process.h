// Running the project's binaries from tests: a command line, its exit code and
// what it printed, with a temporary folder per test.
#ifndef XMOD_TESTS_PROCESS_H_
#define XMOD_TESTS_PROCESS_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace xmod::testing {

struct CommandResult {
  int code = -1;
  std::string out;
  std::string err;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A fresh folder named after the running test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("xmod_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs program + args through the shell, capturing stdout and stderr.
  CommandResult Command(const std::string& program, const std::vector<std::string>& args) {
    std::string command = program;
    for (const std::string& a : args) command += " " + ShellQuote(a);
    command += " >" + Path("stdout") + " 2>" + Path("stderr");
    CommandResult r;
    const int status = std::system(command.c_str());
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = Slurp(Path("stdout"));
    r.err = Slurp(Path("stderr"));
    return r;
  }

  std::filesystem::path dir_;
};

}  // namespace xmod::testing

#endif  // XMOD_TESTS_PROCESS_H_
