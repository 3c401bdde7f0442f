// The `xmod` command line (README.md and docs/): flag parsing with CLI11 and one small
// function per command over the sweep and store libraries. Exit codes: 0 success,
// 1 runtime failure, 2 invalid input or usage.
#ifndef XMOD_ORCHESTRATOR_CLI_COMMANDS_H_
#define XMOD_ORCHESTRATOR_CLI_COMMANDS_H_

#include <ostream>

namespace xmod {

// Runs `xmod argv[1..]`, printing results to `out` and messages to `err`.
int RunXmod(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_CLI_COMMANDS_H_
