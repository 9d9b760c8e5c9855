#include <fido.h>
#include <fido/credman.h>
