"""The reference relying party (Tools/rp/tokenbridge_rp.py runs it), by concern: wire (TLV, base64url, refusals),
verify (keys, signatures, attestation, metadata statements), payloads (QR PNG, JWE), uaf and oob (the services'
work), rp (their state), handler, device_routes and admin (HTTP), server (arguments and the loop)."""
