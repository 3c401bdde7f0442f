#pragma once
// Where the tests and benchmarks find the checkout and the binaries they drive.
//
// The paths differ from one checkout to the next (CI builds a fresh clone each
// run). Passed as -D definitions to every test source they would change each
// source's compile command, and ccache would recompile every test in every
// clone. Here the macros name functions instead: the command lines stay the same
// across clones and only paths.cc, one small file, is compiled anew.

namespace xmod::testing {

const char* SourceDir();   // the repository's root
const char* XmodBin();     // the `xmod` binary
const char* TrainBin();    // `xmod-train` ("" where LibTorch was not found)
const char* WorkerBin();   // `xmod-worker` ("" where LibTorch was not found)
const char* EchoBinDir();  // the echo test family's `xmod` and `xmod-worker`

}  // namespace xmod::testing

#define XMOD_SOURCE_DIR ::xmod::testing::SourceDir()
#define XMOD_BIN ::xmod::testing::XmodBin()
#define XMOD_TRAIN_BIN ::xmod::testing::TrainBin()
#define XMOD_WORKER_BIN ::xmod::testing::WorkerBin()
#define XMOD_ECHO_BIN_DIR ::xmod::testing::EchoBinDir()
