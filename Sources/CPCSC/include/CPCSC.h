// pcsc-lite's public API. winscard.h includes <pcsclite.h> and <wintypes.h> by bare name (their
// pkg-config file adds -I/usr/include/PCSC, plus a -pthread flag SwiftPM warns about), so this
// target's include/ holds two one-line forwarders instead.
#include "/usr/include/PCSC/winscard.h"
