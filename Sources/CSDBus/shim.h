// sd-bus (libsystemd), for `tokenbridge serve` (docs/dbus-api.md). Only its non-variadic functions are called
// (values are appended and read one basic value or container at a time): they reach the forwarding definitions
// Tools/gen-lazy generates, loading libsystemd.so.0 at the first use.
#include <systemd/sd-bus.h>
