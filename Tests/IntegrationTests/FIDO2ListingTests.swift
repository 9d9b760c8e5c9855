import Foundation
import Testing

@testable import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// A listing reads FIDO2 keys through libfido2, one thread per key, closing each (`TokenDiscovery.probe` without
/// `keep`). It must read what a command's session reads (checked against the real virtual key, before and after a
/// PIN is set), and end every answer a key may give as a result or an error, never a hang or a crash: INIT
/// answers to another nonce, KEEPALIVE, reports of other channels, a message over several packets, an error
/// status, CTAPHID_ERROR, a U2F-only key, bad CBOR, silence.
@Suite(.tags(.pcscd), .serialized, .enabled(if: hasPrivatePCSCD, "needs the private pcscd: run Tools/test"))
struct FIDO2ListingTests {
  static let quick = FIDO2Deadlines(probeMs: 500, commandMs: 500, userPresenceMs: 500)

  static func listed(_ ref: FIDO2DeviceRef, deadlines: FIDO2Deadlines = quick) -> Result<TokenInfo, TokenError> {
    switch TokenDiscovery.probe(ref, deadlines: deadlines, tracing: false, details: true, keep: false).0 {
    case .listed(let t): .success(t)
    case .unusable(let u): .failure(u.reason)
    case .found: .failure(.unsupported("a session (a listing opens none)"))
    }
  }

  @Test func theListingReadsWhatASessionReads() throws {
    let key = try VirtualFIDO2Key()
    #expect(try Self.listed(key.ref).get() == Self.throughSession(key.ref).get())
    try FIDO2Session(key.ref).setPIN(Array("1234".utf8), old: nil)
    let after = try Self.listed(key.ref).get()
    #expect(after == (try Self.throughSession(key.ref).get()))
    #expect(after.pin?.retriesLeft == 8 && after.fido2?.pinIsSet == true)
  }

  @Test func aKeyThatAnswersOthersAndKeepsAliveIsRead() throws {
    let key = try ScriptedKey(mode: "noisy")
    let t = try Self.listed(key.ref).get()
    #expect(t.fido2?.versions == ["FIDO_2_0"])
    #expect(t.fido2?.extensions == ["hmac-secret", "credProtect", "largeBlobKey", "credBlob", "minPinLength"])
    #expect(t.fido2?.aaguid == String(repeating: "AB", count: 16))
    #expect(t.pin == PINStatus(kind: .pin, retriesLeft: 5, maxRetries: 8, powerCycleRequired: false))
    #expect(t.capabilities == ["fido2", "hmac-secret"])
  }

  @Test func everyRefusalIsAnError() throws {
    // The getInfo inside libfido2's open failed: libfido2 took the key for U2F-only, and the session's own getInfo
    // (`FIDO2Session.open`) says why.
    let cases: [(String, TokenError)] = [
      ("u2f", .unsupported("FIDO2 (CTAP2): it answered CTAPHID_INIT as a U2F-only key")),
      ("status", .fido2(0x01, operation: "getInfo")),
      ("busy", .fido2(-2, operation: "getInfo")),  // CTAPHID_ERROR: FIDO_ERR_RX, as libfido2 says it
      ("bad-cbor", .malformedResponse(operation: "getInfo")),
      ("short-init", .fido2(-2, operation: "open")),  // libfido2 reads a short INIT answer as FIDO_ERR_RX
      // libfido2 takes the first INIT answer it reads as the answer to its own (dev.c `fido_dev_open_rx`).
      ("other-nonce", .fido2(-2, operation: "open")),
      ("bad-retries", .malformedResponse(operation: "getPINRetries")),
      ("silent", .noAnswer(operation: "open")),
      ("after-init", .noAnswer(operation: "getInfo")),
    ]
    for (mode, expected) in cases {
      let key = try ScriptedKey(mode: mode)
      #expect(Self.listed(key.ref).failure == expected, "\(mode)")
    }
  }

  /// A command's session (kept open): the same odd keys end the same way there.
  static func throughSession(_ ref: FIDO2DeviceRef, deadlines: FIDO2Deadlines = quick) -> Result<TokenInfo, TokenError>
  {
    switch TokenDiscovery.probe(ref, deadlines: deadlines, tracing: false, details: true).0 {
    case .found(let k): .success(k.info)
    case .unusable(let u): .failure(u.reason)
    case .listed: .failure(.unsupported("a listing (a command opens a session)"))
    }
  }

  @Test(.tags(.slow)) func aSessionTakesTheSameAnswersAsTheListing() throws {
    // Each path gets a key of its own (the script serves one connection at a time), and room enough that only the
    // silent modes run out of time even while other suites load the machine (the whole suite runs in parallel).
    let roomy = FIDO2Deadlines(probeMs: 1500, commandMs: 1500, userPresenceMs: 1500)
    let (a, b) = (try ScriptedKey(mode: "noisy"), try ScriptedKey(mode: "noisy"))
    let (session, listing) = (try Self.throughSession(a.ref, deadlines: roomy).get(), try Self.listed(b.ref).get())
    #expect(
      session.fido2 == listing.fido2 && session.pin == listing.pin && session.capabilities == listing.capabilities)
    #expect(session.fido2?.versions == ["FIDO_2_0"] && session.pin?.retriesLeft == 5)
    for mode in [
      "u2f", "status", "busy", "bad-cbor", "short-init", "other-nonce", "bad-retries", "silent", "after-init",
    ] {
      let (a, b) = (try ScriptedKey(mode: mode), try ScriptedKey(mode: mode))
      let session = Self.throughSession(a.ref, deadlines: roomy).failure
      #expect(session != nil && session == Self.listed(b.ref, deadlines: roomy).failure, "\(mode)")
    }
  }

  @Test func severalKeysAreReadTogetherEachOnItsOwn() throws {
    // A thread per key: the silent key ends at its own deadline, the others are read as alone.
    let silent = try ScriptedKey(mode: "silent")
    let live = try VirtualFIDO2Key()
    let noisy = try ScriptedKey(mode: "noisy")
    let afterInit = try ScriptedKey(mode: "after-init")
    let gone = FIDO2DeviceRef(
      path: NSTemporaryDirectory() + "gone-\(UUID().uuidString.prefix(8)).sock", product: "gone", isVirtual: true)
    var discovery = TokenDiscovery(trace: nil, includePUK: false, includeFIDO2: true)
    discovery.sessions = false
    discovery.virtualFIDO2Paths = [silent.ref, live.ref, noisy.ref, afterInit.ref, gone].map(\.path)
    discovery.fido2Deadlines = Self.quick
    let result = try discovery.discover()
    let unusable = Dictionary(result.unusableCards.map { ($0.reader, $0.reason) }, uniquingKeysWith: { a, _ in a })
    #expect(unusable[silent.path] == .noAnswer(operation: "open"))
    #expect(unusable[afterInit.path] == .noAnswer(operation: "getInfo"))
    #expect(unusable[gone.path] == nil)  // a socket that is not there is not a key
    let listed = Dictionary(result.listed.map { ($0.reader, $0) }, uniquingKeysWith: { a, _ in a })
    #expect(listed[live.path]?.fido2 == (try Self.throughSession(live.ref).get()).fido2)
    #expect(listed[live.path]?.pin == nil)
    #expect(listed[noisy.path]?.fido2?.versions == ["FIDO_2_0"] && listed[noisy.path]?.pin?.retriesLeft == 5)
  }

  @Test func aKeyThatIsGoneIsRemoved() throws {
    let path = NSTemporaryDirectory() + "gone-\(UUID().uuidString.prefix(8)).sock"
    let ref = FIDO2DeviceRef(path: path, product: "gone", isVirtual: true)
    #expect(Self.listed(ref).failure == .smartCard(.cardRemoved(reader: path)))
  }
}

extension Result {
  var failure: Failure? {
    if case .failure(let e) = self { return e }
    return nil
  }
}

/// A SOCK_SEQPACKET key (Python) that answers as its mode says ("silent": accepts and never answers, "after-init":
/// answers CTAPHID_INIT and nothing after it; the others below); stopped by pid.
final class ScriptedKey {
  static let script = #"""
    import socket, sys
    path, mode = sys.argv[1], sys.argv[2]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(path); s.listen(16)
    open(path + ".ready", "w").close()

    def send(c, cid, cmd, payload):
        c.send((cid + bytes([cmd, len(payload) >> 8, len(payload) & 255]) + payload[:57]).ljust(64, b"\0"))
        rest, seq = payload[57:], 0
        while rest:
            c.send((cid + bytes([seq]) + rest[:59]).ljust(64, b"\0"))
            rest, seq = rest[59:], seq + 1

    def text(t):
        return bytes([0x60 + len(t)]) + t.encode()

    exts = [b"hmac-secret", b"credProtect", b"largeBlobKey", b"credBlob", b"minPinLength"]
    info = (b"\xa4\x01\x81" + text("FIDO_2_0") + b"\x02" + bytes([0x80 + len(exts)])
            + b"".join(bytes([0x60 + len(e)]) + e for e in exts)
            + b"\x03\x50" + b"\xab" * 16 + b"\x04\xa1" + text("clientPin") + b"\xf5")
    cid = b"\x00\x00\x00\x42"
    held = []
    while True:
        c, _ = s.accept()
        held.append(c)
        if mode == "silent":
            continue
        while True:
            try:
                f = c.recv(64)
            except ConnectionResetError:  # the client closed with an answer unread: as the end of its connection
                f = b""
            if not f:
                break
            if f[4] == 0x86:
                nonce = f[7:15]
                caps = 0x01 if mode == "u2f" else 0x0D
                if mode == "other-nonce":  # first an answer to someone else's INIT
                    send(c, b"\xff\xff\xff\xff", 0x86, bytes(b ^ 0xFF for b in nonce) + b"\x00\x00\x00\x99" + bytes([2, 0, 2, 1, caps]))
                body = nonce + cid + bytes([2, 0, 2, 1, caps])
                send(c, b"\xff\xff\xff\xff", 0x86, body[:12] if mode == "short-init" else body)
            elif f[4] == 0x90 and f[7] == 0x04 and mode != "after-init":
                if mode == "noisy":
                    c.send((cid + bytes([0xBB, 0, 1, 1])).ljust(64, b"\0"))  # KEEPALIVE PROCESSING
                    send(c, b"\x00\x00\x00\x07", 0x90, b"\x00\xa0")  # another channel's answer
                if mode == "busy":
                    send(c, cid, 0xBF, b"\x06")
                elif mode == "status":
                    send(c, cid, 0x90, b"\x01")
                elif mode == "bad-cbor":
                    send(c, cid, 0x90, b"\x00" + info[:-3])
                else:
                    send(c, cid, 0x90, b"\x00" + info)
            elif f[4] == 0x90 and f[7] == 0x06 and mode != "after-init":
                send(c, cid, 0x90, b"\x00\xa1\x03\x60" if mode == "bad-retries" else b"\x00\xa1\x03\x05")
    """#
  let process = Process()
  let path: String
  var ref: FIDO2DeviceRef { FIDO2DeviceRef(path: path, product: "scripted", isVirtual: true) }

  init(mode: String) throws {
    path = NSTemporaryDirectory() + "scripted-\(UUID().uuidString.prefix(8)).sock"
    process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    process.arguments = ["-c", Self.script, path, mode]
    try process.run()
    try waitForFile(path + ".ready")
  }

  deinit {
    kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
    unlink(path)
    unlink(path + ".ready")
  }
}
