#!/usr/bin/env python3
"""tokenbridge-rp: a reference relying party speaking the nevisFIDO UAF endpoints (test fixture, not product).

Verifies for real, with its own TLV parser (independent of the client's Swift code): ECDSA P-256 signatures
(DER and raw), public keys (raw X9.62 and DER SPKI), FINAL_CHALLENGE_HASH, single-use expiring challenges,
appID and facet ID, policy AAIDs, growing counters and transaction content hashes. Loopback only by default.
With --metadata (FIDO metadata statements, v3.0 or the UAF 1.1 numeric form, as `tokenbridge metadata` prints them)
a registration must match its AAID's statement: signature algorithm, public key encoding, attestation type and
trust anchors, authenticatorVersion.
Also the out-of-band services: dispatch targets (create, query, modify with a JWS body, delete), dispatch tokens,
redeem, status, the device service (device credentials, pending operations), every device request checked for a
`Device-Signature` (ES256 compact JWS by the target's key; request id used once, creation time within a window).
Dispatches can come encrypted for the target's `encryptionKey` (`"encrypt": true` in the dispatch request: a
compact JWE, ECDH-ES + A256GCM, as the client's Sources/TokenBridge/OutOfBand/PayloadEncryption.swift expects),
and the QR dispatchers answer a PNG (base64) rendered with segno; `POST /_admin/qr {"text"}` renders any text.
See ../shared/specs/backend-contract.md (sections 1-3, 5, 6); the wire choices where it is silent are the client's
Sources/TokenBridge/DeviceInformation/DeviceWire.swift.
The code is the package tbrp beside this file; this script only starts it.
"""
import os
import sys

sys.dont_write_bytecode = True  # the checkout may be read-only (the lab guest's 9p share): nothing is written beside it
HERE = os.path.dirname(os.path.realpath(__file__))
if HERE not in sys.path:  # also under -P / PYTHONSAFEPATH, which leave the script's directory out
    sys.path.insert(0, HERE)

from tbrp.server import main  # noqa: E402  (the package is found through the path set above)

if __name__ == "__main__":
    main(__doc__.splitlines()[0])
