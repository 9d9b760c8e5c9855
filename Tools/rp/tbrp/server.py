"""Arguments, the loopback rule and the server loop."""
import argparse
import os
import sys
from http.server import ThreadingHTTPServer

from .handler import Handler
from .rp import RP


def main(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--host", default="127.0.0.1", help="loopback by default")
    p.add_argument("--db", default=":memory:")
    p.add_argument("--facet", action="append", default=[], help="trusted facet ID (repeatable)")
    p.add_argument("--aaid", action="append", default=[], help="accepted AAID (repeatable)")
    p.add_argument("--app-id", default=None, help="appID sent in requests (default: our facets URL)")
    p.add_argument("--app-id-path", default="/nevisfido/uaf/1.1/facets", help="appID as a path on this server")
    p.add_argument("--challenge-ttl", type=float, default=120.0)
    p.add_argument("--token-ttl", type=float, default=300.0, help="seconds an out-of-band token lives")
    p.add_argument("--signature-window", type=float, default=300.0,
                   help="seconds a Device-Signature's creation time may differ from now")
    p.add_argument("--attestation-root", help="PEM trust anchor: basic full attestation required and checked")
    p.add_argument("--metadata", action="append", default=[],
                   help="a FIDO UAF metadata statement file (v3.0 or UAF 1.1 form; one statement or a JSON array; "
                        "repeatable): registrations must then match their AAID's statement")
    p.add_argument("--link-base", default="https://tokenbridge.example/open",
                   help="the link dispatcher's base (its answer: <link-base>?dispatchTokenResponse=...)")
    p.add_argument("--port-file", help="write the chosen port here once listening")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    if args.host not in ("127.0.0.1", "::1", "localhost") and not os.environ.get("TB_RP_ALLOW_NON_LOOPBACK"):
        sys.exit("tokenbridge-rp: refusing a non-loopback address (set TB_RP_ALLOW_NON_LOOPBACK=1)")
    args.aaid = args.aaid or ["7B1D#0001", "7B1D#0002"]
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    args.base_url = f"http://{args.host}:{server.server_address[1]}"
    args.facet = args.facet or [args.base_url]
    Handler.rp = RP(args)
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(server.server_address[1]))
        os.rename(args.port_file + ".tmp", args.port_file)
    sys.stderr.write(f"tokenbridge-rp: listening on {args.base_url}\n")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
