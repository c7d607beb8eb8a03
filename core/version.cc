#include "sdrt/version.h"

namespace sdrt {

const char* Version() { return SDRT_VERSION_STRING; }

int AbiVersion() { return SDRT_ABI_VERSION; }

}  // namespace sdrt
