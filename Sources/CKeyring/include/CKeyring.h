// The kernel's key retention service (keyrings(7)) through its two system calls, add_key(2) and keyctl(2), for
// secrets that must outlive a killed process but never reach a file: `tokenbridge provision` keeps a PIN it set and
// has not yet handed over there. glibc's syscall() is variadic, which Swift cannot call; these are fixed-arity
// forwarders, nothing more (no libkeyutils: the kernel interface is all it needs).
#ifndef CKEYRING_H
#define CKEYRING_H
#include <stddef.h>
#include <stdint.h>

// KEY_SPEC_USER_KEYRING: the calling user's keyring, shared by every process of the uid.
#define TB_KEY_SPEC_USER_KEYRING (-4)

// add_key("user", description, payload, length, keyring): the key's serial, or -1 with errno.
int32_t tb_keyring_add(const char *description, const void *payload, size_t length, int32_t keyring);
// keyctl(KEYCTL_SEARCH, keyring, "user", description, 0): the serial, or -1 with errno (ENOKEY: none).
int32_t tb_keyring_search(int32_t keyring, const char *description);
// keyctl(KEYCTL_READ, key, buffer, length): the payload's full length (may exceed `length`), or -1 with errno.
long tb_keyring_read(int32_t key, void *buffer, size_t length);
// keyctl(KEYCTL_SET_TIMEOUT, key, seconds): 0, or -1 with errno.
long tb_keyring_set_timeout(int32_t key, unsigned seconds);
// keyctl(KEYCTL_INVALIDATE, key): the key is gone at once for everyone; 0, or -1 with errno.
long tb_keyring_invalidate(int32_t key);
#endif
