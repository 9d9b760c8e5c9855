#include <fido.h>
