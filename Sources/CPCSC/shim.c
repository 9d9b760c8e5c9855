// Empty: CPCSC only re-exports pcsc-lite headers; SwiftPM needs one source file in a C target.
#include "CPCSC.h"
