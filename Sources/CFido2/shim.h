#include <fido.h>
#include <fido/credman.h>
#include <fido/config.h>
