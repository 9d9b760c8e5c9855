#pragma once
#include <stddef.h>
#include <stdint.h>

/// The primitives of Sources/SystemCrypto on the system's OpenSSL libcrypto (OpenSSL 3 API, none deprecated),
/// loaded at the first call through CLazy. Sizes are the caller's: `bits` is 256 (P-256, SHA-256) or 384
/// (P-384, SHA-384); a scalar is bits/8 bytes, an uncompressed point 1 + 2·bits/8, a raw signature r‖s 2·bits/8.
/// Every function answers one of these.
enum {
  TBC_OK = 0,
  TBC_INVALID = 1,      // the input is not a valid key, point, signature, or the tag did not authenticate
  TBC_FAILED = 2,       // libcrypto refused (out of memory, or an internal error)
  TBC_UNAVAILABLE = 3,  // libcrypto cannot be loaded: tbc_unavailable() says why
};

/// NULL when libcrypto is loaded, else why not (text valid for the life of the process).
const char *tbc_unavailable(void);
/// Overwrites `length` bytes at `p` with zeros in a way the compiler keeps (explicit_bzero).
void tbc_wipe(void *p, size_t length);

int tbc_random(uint8_t *out, size_t length);
/// SHA-256 (bits 256) or SHA-384 (bits 384) of `data`; `out` holds bits/8 bytes.
int tbc_hash(int bits, const uint8_t *data, size_t length, uint8_t *out);
/// HMAC-SHA-256 (RFC 2104); `out` holds 32 bytes.
int tbc_hmac_sha256(const uint8_t *key, size_t key_length, const uint8_t *data, size_t length, uint8_t *out);
/// HKDF-SHA-256 (RFC 5869): `out_length` bytes from the input key material, salt and info.
int tbc_hkdf_sha256(const uint8_t *ikm, size_t ikm_length, const uint8_t *salt, size_t salt_length,
                    const uint8_t *info, size_t info_length, uint8_t *out, size_t out_length);

/// The uncompressed public point of the private scalar `scalar`; TBC_INVALID unless 1 <= scalar < n.
int tbc_ec_public(int bits, const uint8_t *scalar, uint8_t *point);
/// A new key pair: a scalar drawn uniformly in [1, n-1] (candidates from RAND_bytes, out of range ones drawn
/// again) and its point.
int tbc_ec_generate(int bits, uint8_t *scalar, uint8_t *point);
/// TBC_OK when `point` is an uncompressed point on the curve (not the point at infinity).
int tbc_ec_check_point(int bits, const uint8_t *point, size_t length);
/// ECDSA over `digest` as given (no hashing here): the DER signature in `der` (capacity in, length out).
int tbc_ecdsa_sign(int bits, const uint8_t *scalar, const uint8_t *point, const uint8_t *digest, size_t digest_length,
                   uint8_t *der, size_t *der_length);
/// TBC_OK when the DER signature verifies over `digest` with `point`, TBC_INVALID when it does not.
int tbc_ecdsa_verify(int bits, const uint8_t *point, const uint8_t *digest, size_t digest_length, const uint8_t *der,
                     size_t der_length);
/// A DER ECDSA-Sig-Value (strict DER, nothing after it) as r‖s, each left-padded to bits/8 bytes.
int tbc_ecdsa_der_to_raw(int bits, const uint8_t *der, size_t der_length, uint8_t *raw);
/// r‖s as DER (capacity in, length out).
int tbc_ecdsa_raw_to_der(int bits, const uint8_t *raw, uint8_t *der, size_t *der_length);
/// ECDH: the x-coordinate of scalar·peer (bits/8 bytes); the peer's point is checked to be on the curve.
int tbc_ecdh(int bits, const uint8_t *scalar, const uint8_t *point, const uint8_t *peer, uint8_t *secret);
/// AES-GCM with a 16-byte tag; the key is 16, 24 or 32 bytes. Encrypting writes `tag`; decrypting checks it and
/// answers TBC_INVALID (and zeros `out`) when it does not authenticate.
int tbc_aes_gcm(int encrypt, const uint8_t *key, size_t key_length, const uint8_t *iv, size_t iv_length,
                const uint8_t *aad, size_t aad_length, const uint8_t *in, size_t length, uint8_t *out, uint8_t *tag);
