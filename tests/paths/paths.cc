#include "tests/paths/paths.h"

// The values come from CMake (tests/paths/CMakeLists.txt); a binary this build
// does not make is the empty string, and a test that needs it is not built.
#ifndef XMOD_PATH_XMOD
#define XMOD_PATH_XMOD ""
#endif
#ifndef XMOD_PATH_TRAIN
#define XMOD_PATH_TRAIN ""
#endif
#ifndef XMOD_PATH_WORKER
#define XMOD_PATH_WORKER ""
#endif
#ifndef XMOD_PATH_ECHO_DIR
#define XMOD_PATH_ECHO_DIR ""
#endif

namespace xmod::testing {

const char* SourceDir() { return XMOD_PATH_SOURCE; }
const char* XmodBin() { return XMOD_PATH_XMOD; }
const char* TrainBin() { return XMOD_PATH_TRAIN; }
const char* WorkerBin() { return XMOD_PATH_WORKER; }
const char* EchoBinDir() { return XMOD_PATH_ECHO_DIR; }

}  // namespace xmod::testing
