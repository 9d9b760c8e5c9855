#pragma once

// Nothing to call: this target defines the Swift runtime's `_swift_stdlib_getUnsafeArgvArgc` for the statically
// linked CLI (see start_args.c). Linked into `tokenbridge` only.
