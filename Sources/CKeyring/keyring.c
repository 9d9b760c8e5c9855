#include "CKeyring.h"
#include <sys/syscall.h>
#include <unistd.h>

// From <linux/keyctl.h> (stable ABI numbers; the header is not needed for five constants).
enum { TB_KEYCTL_SEARCH = 10, TB_KEYCTL_READ = 11, TB_KEYCTL_SET_TIMEOUT = 15, TB_KEYCTL_INVALIDATE = 21 };

int32_t tb_keyring_add(const char *description, const void *payload, size_t length, int32_t keyring) {
  return (int32_t)syscall(SYS_add_key, "user", description, payload, length, keyring);
}

int32_t tb_keyring_search(int32_t keyring, const char *description) {
  return (int32_t)syscall(SYS_keyctl, TB_KEYCTL_SEARCH, keyring, "user", description, 0);
}

long tb_keyring_read(int32_t key, void *buffer, size_t length) {
  return syscall(SYS_keyctl, TB_KEYCTL_READ, key, buffer, length);
}

long tb_keyring_set_timeout(int32_t key, unsigned seconds) {
  return syscall(SYS_keyctl, TB_KEYCTL_SET_TIMEOUT, key, seconds);
}

long tb_keyring_invalidate(int32_t key) { return syscall(SYS_keyctl, TB_KEYCTL_INVALIDATE, key); }
