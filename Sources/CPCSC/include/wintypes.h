#include "/usr/include/PCSC/wintypes.h"
