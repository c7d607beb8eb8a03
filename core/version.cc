#include "sdrt/version.h"

namespace sdrt {

const char* Version() { return SDRT_VERSION_STRING; }

}  // namespace sdrt
