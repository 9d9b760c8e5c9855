import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// The card side of vsmartcard's vpcd protocol: a TCP client to the vpcd driver inside pcscd. Frames are
/// `uint16 big-endian length ‖ payload`; a 1-byte payload is a control message (00 off, 01 on, 02 reset,
/// 04 get ATR), anything longer a C-APDU (../shared/specs/token-protocols.md §6).
public final class VPCDLink: @unchecked Sendable {
  public let host: String
  public let port: UInt16
  let card: VirtualPIVCard
  let log: (String) -> Void
  let lock = NSLock()
  var _inserted = true
  var _stopped = false
  var fd: Int32 = -1
  /// Test hook: cuts a flow at its k-th APDU (`RequestPause`).
  public var pause: RequestPause?
  /// How long the card takes to answer each APDU (`LatencyProfile`; none by default).
  public var latency = LatencyProfile.none

  public init(host: String, port: UInt16, card: VirtualPIVCard, log: @escaping (String) -> Void) {
    self.host = host
    self.port = port
    self.card = card
    self.log = log
  }

  /// Card present in the reader? Setting false closes the connection, which vpcd sees as removal.
  public var inserted: Bool {
    get { lock.withLock { _inserted } }
    set {
      lock.withLock { _inserted = newValue }
      if !newValue { closeSocket() }
    }
  }

  public func stop() {
    lock.withLock { _stopped = true }
    closeSocket()
  }

  var stopped: Bool { lock.withLock { _stopped } }

  func closeSocket() {
    lock.withLock {
      if fd >= 0 {
        shutdown(fd, Int32(SHUT_RDWR))
      }
    }
  }

  /// Connects (and reconnects after pcscd restarts or a re-insertion) until `stop()`.
  public func run() {
    var announced = false
    while !stopped {
      guard inserted, let s = connectOnce() else {
        usleep(200_000)
        continue
      }
      lock.withLock { fd = s }
      log("connected to vpcd at \(host):\(port)")
      announced = true
      serve(s)
      lock.withLock { fd = -1 }
      close(s)
      card.powerCycle()
      if announced { log(inserted ? "vpcd connection closed; reconnecting" : "card removed") }
    }
  }

  func connectOnce() -> Int32? {
    let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard s >= 0 else { return nil }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = port.bigEndian
    guard inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host, &addr.sin_addr) == 1 else {
      close(s)
      return nil
    }
    let rc = withUnsafePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    if rc != 0 {
      close(s)
      return nil
    }
    var one: Int32 = 1
    setsockopt(s, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    return s
  }

  func serve(_ s: Int32) {
    while !stopped && inserted {
      guard let header = readExactly(s, 2) else { return }
      let len = Int(header[0]) << 8 | Int(header[1])
      // The payload needs no quick ACK: nothing waits for its ACK (the reply carries it).
      guard let payload = socketRead(s, len) else { return }
      if len == 1 {
        switch payload[0] {
        case 0x00, 0x02: card.powerCycle()  // power off / reset: no reply
        case 0x01: break  // power on: no reply
        case 0x04: guard send(s, card.atr) else { return }
        default: log("unknown vpcd control byte \(payload[0])")
        }
        continue
      }
      let card = self.card
      let reply = pause.map { $0.around({ card.process(payload) }, dropped: [0x6F, 0x00])! } ?? card.process(payload)
      LatencyProfile.wait(latency.pivDelay(payload))
      guard send(s, reply) else { return }
    }
  }

  func readExactly(_ s: Int32, _ n: Int) -> [UInt8]? {
    // vpcd writes the length and the payload in two sends; without an immediate ACK of the length, Nagle on its
    // side holds the payload back until our delayed ACK (~40 ms per APDU). TCP_QUICKACK is reset by the kernel
    // once we send (the reply): set it before each frame's length is read.
    var one: Int32 = 1
    setsockopt(s, Int32(IPPROTO_TCP), TCP_QUICKACK, &one, socklen_t(MemoryLayout<Int32>.size))
    return socketRead(s, n)
  }

  func send(_ s: Int32, _ payload: [UInt8]) -> Bool {
    socketSend(s, [UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)] + payload)
  }
}
