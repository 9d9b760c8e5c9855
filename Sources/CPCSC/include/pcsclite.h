#include "/usr/include/PCSC/pcsclite.h"
