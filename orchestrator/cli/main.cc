// `xmod`: the researcher's command. All logic lives in orchestrator/cli.
#include <iostream>

#include "orchestrator/cli/commands.h"

int main(int argc, char** argv) { return xmod::RunXmod(argc, argv, std::cout, std::cerr); }
