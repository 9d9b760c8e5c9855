// Sources/SystemCrypto's primitives on OpenSSL's libcrypto (3.x API). Keys enter as raw scalars and points and
// live in libcrypto only for the one operation (EVP_PKEY_free clears a private key); scalars here are wiped
// before their memory is freed.
#include "CSystemCrypto.h"

#include <CLazy.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/obj_mac.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <string.h>

const char *tbc_unavailable(void) { return tb_lazy_load(TB_LIB_CRYPTO); }

void tbc_wipe(void *p, size_t length) {
  if (p && length) explicit_bzero(p, length);
}

#define LOADED()                                          \
  do {                                                    \
    if (tb_lazy_load(TB_LIB_CRYPTO)) return TBC_UNAVAILABLE; \
  } while (0)

static size_t size_of(int bits) { return bits == 384 ? 48 : 32; }
static int nid_of(int bits) { return bits == 384 ? NID_secp384r1 : NID_X9_62_prime256v1; }
static const char *group_of(int bits) { return bits == 384 ? "secp384r1" : "prime256v1"; }

int tbc_random(uint8_t *out, size_t length) {
  LOADED();
  return length == 0 || RAND_bytes(out, (int)length) == 1 ? TBC_OK : TBC_FAILED;
}

int tbc_hash(int bits, const uint8_t *data, size_t length, uint8_t *out) {
  LOADED();
  return EVP_Digest(data, length, out, NULL, bits == 384 ? EVP_sha384() : EVP_sha256(), NULL) == 1 ? TBC_OK
                                                                                                  : TBC_FAILED;
}

int tbc_hmac_sha256(const uint8_t *key, size_t key_length, const uint8_t *data, size_t length, uint8_t *out) {
  LOADED();
  unsigned int n = 0;
  static const uint8_t none = 0;
  if (key_length > INT32_MAX) return TBC_INVALID;
  if (!key_length) key = &none;
  return HMAC(EVP_sha256(), key, (int)key_length, data, length, out, &n) && n == 32 ? TBC_OK : TBC_FAILED;
}

int tbc_hkdf_sha256(const uint8_t *ikm, size_t ikm_length, const uint8_t *salt, size_t salt_length,
                    const uint8_t *info, size_t info_length, uint8_t *out, size_t out_length) {
  LOADED();
  if (ikm_length == 0 || out_length == 0 || out_length > 255 * 32) return TBC_INVALID;
  int status = TBC_FAILED;
  EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
  EVP_KDF_CTX *ctx = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
  if (ctx) {
    OSSL_PARAM params[5], *p = params;
    *p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0);
    *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)ikm, ikm_length);
    // An absent salt is HashLen zeros (RFC 5869 §2.2), which is also what an empty one gives.
    if (salt_length) *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, salt_length);
    if (info_length) *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, info_length);
    *p = OSSL_PARAM_construct_end();
    if (EVP_KDF_derive(ctx, out, out_length, params) == 1) status = TBC_OK;
  }
  EVP_KDF_CTX_free(ctx);
  EVP_KDF_free(kdf);
  return status;
}

// The scalar as a BIGNUM when 1 <= scalar < n; NULL otherwise (*status says why).
static BIGNUM *scalar_in_range(const EC_GROUP *group, int bits, const uint8_t *scalar, int *status) {
  BIGNUM *d = BN_secure_new();
  *status = TBC_FAILED;
  if (!d) return NULL;
  if (!BN_bin2bn(scalar, (int)size_of(bits), d)) {
    BN_clear_free(d);
    return NULL;
  }
  if (BN_is_zero(d) || BN_cmp(d, EC_GROUP_get0_order(group)) >= 0) {
    BN_clear_free(d);
    *status = TBC_INVALID;
    return NULL;
  }
  *status = TBC_OK;
  return d;
}

int tbc_ec_public(int bits, const uint8_t *scalar, uint8_t *point) {
  LOADED();
  int status = TBC_FAILED;
  EC_GROUP *group = EC_GROUP_new_by_curve_name(nid_of(bits));
  BIGNUM *d = group ? scalar_in_range(group, bits, scalar, &status) : NULL;
  EC_POINT *q = d ? EC_POINT_new(group) : NULL;
  status = d ? TBC_FAILED : status;
  size_t n = 1 + 2 * size_of(bits);
  if (q && EC_POINT_mul(group, q, d, NULL, NULL, NULL) == 1 &&
      EC_POINT_point2oct(group, q, POINT_CONVERSION_UNCOMPRESSED, point, n, NULL) == n)
    status = TBC_OK;
  EC_POINT_free(q);
  BN_clear_free(d);
  EC_GROUP_free(group);
  return status;
}

int tbc_ec_generate(int bits, uint8_t *scalar, uint8_t *point) {
  LOADED();
  // For P-256 a candidate is out of range with probability about 2^-32, for P-384 about 2^-190.
  for (int tries = 0; tries < 64; tries++) {
    if (RAND_bytes(scalar, (int)size_of(bits)) != 1) break;
    int status = tbc_ec_public(bits, scalar, point);
    if (status != TBC_INVALID) return status;
  }
  tbc_wipe(scalar, size_of(bits));
  return TBC_FAILED;
}

int tbc_ec_check_point(int bits, const uint8_t *point, size_t length) {
  LOADED();
  if (length != 1 + 2 * size_of(bits) || point[0] != 0x04) return TBC_INVALID;
  EC_GROUP *group = EC_GROUP_new_by_curve_name(nid_of(bits));
  EC_POINT *q = group ? EC_POINT_new(group) : NULL;
  int status = q ? TBC_INVALID : TBC_FAILED;
  // oct2point refuses a point that is not on the curve.
  if (q && EC_POINT_oct2point(group, q, point, length, NULL) == 1 && !EC_POINT_is_at_infinity(group, q))
    status = TBC_OK;
  EC_POINT_free(q);
  EC_GROUP_free(group);
  return status;
}

// An EVP_PKEY of the curve from an uncompressed point and, when `scalar` is given, its private scalar.
static EVP_PKEY *key_of(int bits, const uint8_t *scalar, const uint8_t *point) {
  EVP_PKEY *key = NULL;
  BIGNUM *d = NULL;
  OSSL_PARAM *params = NULL;
  EVP_PKEY_CTX *ctx = NULL;
  OSSL_PARAM_BLD *b = OSSL_PARAM_BLD_new();
  if (!b || !OSSL_PARAM_BLD_push_utf8_string(b, OSSL_PKEY_PARAM_GROUP_NAME, group_of(bits), 0) ||
      !OSSL_PARAM_BLD_push_octet_string(b, OSSL_PKEY_PARAM_PUB_KEY, point, 1 + 2 * size_of(bits)))
    goto done;
  if (scalar) {
    d = BN_secure_new();
    if (!d || !BN_bin2bn(scalar, (int)size_of(bits), d) || !OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_PRIV_KEY, d))
      goto done;
  }
  params = OSSL_PARAM_BLD_to_param(b);
  ctx = params ? EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL) : NULL;
  if (!ctx || EVP_PKEY_fromdata_init(ctx) != 1 ||
      EVP_PKEY_fromdata(ctx, &key, scalar ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY, params) != 1)
    key = NULL;
done:
  EVP_PKEY_CTX_free(ctx);
  // The scalar came from a secure BIGNUM, so the builder put it in the params' secure block, which
  // OSSL_PARAM_free clears as it frees it.
  OSSL_PARAM_free(params);
  BN_clear_free(d);
  OSSL_PARAM_BLD_free(b);
  return key;
}

int tbc_ecdsa_sign(int bits, const uint8_t *scalar, const uint8_t *point, const uint8_t *digest, size_t digest_length,
                   uint8_t *der, size_t *der_length) {
  LOADED();
  int status = TBC_FAILED;
  EVP_PKEY *key = key_of(bits, scalar, point);
  EVP_PKEY_CTX *ctx = key ? EVP_PKEY_CTX_new(key, NULL) : NULL;
  if (ctx && EVP_PKEY_sign_init(ctx) == 1 && EVP_PKEY_sign(ctx, der, der_length, digest, digest_length) == 1)
    status = TBC_OK;
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(key);
  return status;
}

int tbc_ecdsa_verify(int bits, const uint8_t *point, const uint8_t *digest, size_t digest_length, const uint8_t *der,
                     size_t der_length) {
  LOADED();
  int status = TBC_FAILED;
  EVP_PKEY *key = key_of(bits, NULL, point);
  EVP_PKEY_CTX *ctx = key ? EVP_PKEY_CTX_new(key, NULL) : NULL;
  if (ctx && EVP_PKEY_verify_init(ctx) == 1)
    status = EVP_PKEY_verify(ctx, der, der_length, digest, digest_length) == 1 ? TBC_OK : TBC_INVALID;
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(key);
  return status;
}

int tbc_ecdsa_der_to_raw(int bits, const uint8_t *der, size_t der_length, uint8_t *raw) {
  LOADED();
  if (der_length > INT32_MAX) return TBC_INVALID;
  const unsigned char *p = der;
  ECDSA_SIG *sig = d2i_ECDSA_SIG(NULL, &p, (long)der_length);
  if (!sig) return TBC_INVALID;
  int status = TBC_INVALID;
  const BIGNUM *r = NULL, *s = NULL;
  ECDSA_SIG_get0(sig, &r, &s);
  int n = (int)size_of(bits);
  // d2i accepts what BER allows; only the one DER encoding of (r, s), with nothing after it, is a signature here.
  unsigned char again[2 * 48 + 9], *q = again;
  int again_length = i2d_ECDSA_SIG(sig, NULL);
  if (p == der + der_length && again_length == (int)der_length && again_length <= (int)sizeof again &&
      i2d_ECDSA_SIG(sig, &q) == again_length && memcmp(again, der, der_length) == 0 && !BN_is_negative(r) &&
      !BN_is_negative(s) && BN_num_bits(r) <= 8 * n && BN_num_bits(s) <= 8 * n && BN_bn2binpad(r, raw, n) == n &&
      BN_bn2binpad(s, raw + n, n) == n)
    status = TBC_OK;
  ECDSA_SIG_free(sig);
  return status;
}

int tbc_ecdsa_raw_to_der(int bits, const uint8_t *raw, uint8_t *der, size_t *der_length) {
  LOADED();
  int n = (int)size_of(bits);
  ECDSA_SIG *sig = ECDSA_SIG_new();
  BIGNUM *r = BN_bin2bn(raw, n, NULL), *s = BN_bin2bn(raw + n, n, NULL);
  if (!sig || !r || !s || ECDSA_SIG_set0(sig, r, s) != 1) {
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    return TBC_FAILED;
  }
  int status = TBC_FAILED;
  int length = i2d_ECDSA_SIG(sig, NULL);
  if (length > 0 && (size_t)length <= *der_length) {
    unsigned char *p = der;
    if (i2d_ECDSA_SIG(sig, &p) == length) {
      *der_length = (size_t)length;
      status = TBC_OK;
    }
  }
  ECDSA_SIG_free(sig);
  return status;
}

int tbc_ecdh(int bits, const uint8_t *scalar, const uint8_t *point, const uint8_t *peer, uint8_t *secret) {
  LOADED();
  int status = tbc_ec_check_point(bits, peer, 1 + 2 * size_of(bits));
  if (status != TBC_OK) return status;
  status = TBC_FAILED;
  EVP_PKEY *own = key_of(bits, scalar, point), *other = key_of(bits, NULL, peer);
  EVP_PKEY_CTX *ctx = own && other ? EVP_PKEY_CTX_new(own, NULL) : NULL;
  size_t n = size_of(bits);
  if (ctx && EVP_PKEY_derive_init(ctx) == 1 && EVP_PKEY_derive_set_peer(ctx, other) == 1 &&
      EVP_PKEY_derive(ctx, secret, &n) == 1 && n == size_of(bits))
    status = TBC_OK;
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(other);
  EVP_PKEY_free(own);
  return status;
}

int tbc_aes_gcm(int encrypt, const uint8_t *key, size_t key_length, const uint8_t *iv, size_t iv_length,
                const uint8_t *aad, size_t aad_length, const uint8_t *in, size_t length, uint8_t *out, uint8_t *tag) {
  LOADED();
  const EVP_CIPHER *cipher = key_length == 16   ? EVP_aes_128_gcm()
                             : key_length == 24 ? EVP_aes_192_gcm()
                             : key_length == 32 ? EVP_aes_256_gcm()
                                                : NULL;
  if (!cipher || iv_length == 0 || iv_length > INT32_MAX || aad_length > INT32_MAX || length > INT32_MAX)
    return TBC_INVALID;
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
  if (!ctx) return TBC_FAILED;
  int status = TBC_FAILED, n = 0, last = 0;
  if (EVP_CipherInit_ex(ctx, cipher, NULL, NULL, NULL, encrypt) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, (int)iv_length, NULL) != 1 ||
      EVP_CipherInit_ex(ctx, NULL, NULL, key, iv, encrypt) != 1 ||
      (aad_length && EVP_CipherUpdate(ctx, NULL, &n, aad, (int)aad_length) != 1) ||
      (length && EVP_CipherUpdate(ctx, out, &n, in, (int)length) != 1))
    goto done;
  // GCM writes all of its output in the update above (n: its length; after the AAD alone, n is the AAD's length).
  uint8_t *end = out + (length ? (size_t)n : 0);
  if (encrypt) {
    if (EVP_CipherFinal_ex(ctx, end, &last) == 1 && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag) == 1)
      status = TBC_OK;
  } else if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, tag) == 1) {
    status = EVP_CipherFinal_ex(ctx, end, &last) == 1 ? TBC_OK : TBC_INVALID;
  }
done:
  if (status != TBC_OK && !encrypt) tbc_wipe(out, length);
  EVP_CIPHER_CTX_free(ctx);
  return status;
}
