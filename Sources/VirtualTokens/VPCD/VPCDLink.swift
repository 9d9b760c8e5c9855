import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The card side of vsmartcard's vpcd protocol: a TCP client to the vpcd driver inside pcscd. Frames are
/// `uint16 big-endian length ‖ payload`; a 1-byte payload is a control message (00 off, 01 on, 02 reset,
/// 04 get ATR), anything longer a C-APDU (../shared/specs/token-protocols.md §6).
public final class VPCDLink: Sendable {
  public let host: String
  public let port: UInt16
  /// The card; `run`'s thread is the one that uses it.
  let card: Mutex<VirtualPIVCard>
  let log: @Sendable (String) -> Void
  /// Whether the card is in the reader, whether `stop` was called, and the connection (`inserted` and `stop` come
  /// from other threads than `run`).
  let link = Mutex((inserted: true, stopped: false, fd: Int32(-1)))
  let settings = Mutex((pause: RequestPause?.none, latency: LatencyProfile.none))

  /// Test hook: cuts a flow at its k-th APDU (`RequestPause`).
  public var pause: RequestPause? {
    get { settings.withLock { $0.pause } }
    set { settings.withLock { $0.pause = newValue } }
  }
  /// How long the card takes to answer each APDU (`LatencyProfile`; none by default).
  public var latency: LatencyProfile {
    get { settings.withLock { $0.latency } }
    set { settings.withLock { $0.latency = newValue } }
  }

  public init(host: String, port: UInt16, card: sending VirtualPIVCard, log: @escaping @Sendable (String) -> Void) {
    self.host = host
    self.port = port
    self.card = Mutex(card)
    self.log = log
  }

  /// Card present in the reader? Setting false closes the connection, which vpcd sees as removal.
  public var inserted: Bool {
    get { link.withLock { $0.inserted } }
    set {
      link.withLock { $0.inserted = newValue }
      if !newValue { closeSocket() }
    }
  }

  public func stop() {
    link.withLock { $0.stopped = true }
    closeSocket()
  }

  var stopped: Bool { link.withLock { $0.stopped } }

  func closeSocket() {
    link.withLock {
      if $0.fd >= 0 {
        shutdown($0.fd, Int32(SHUT_RDWR))
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
      link.withLock { $0.fd = s }
      log("connected to vpcd at \(host):\(port)")
      announced = true
      serve(s)
      link.withLock { $0.fd = -1 }
      close(s)
      card.withLock { $0.powerCycle() }
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
        case 0x00, 0x02: card.withLock { $0.powerCycle() }  // power off / reset: no reply
        case 0x01: break  // power on: no reply
        case 0x04: guard send(s, card.withLock { $0.atr }) else { return }
        default: log("unknown vpcd control byte \(payload[0])")
        }
        continue
      }
      let (pause, latency) = settings.withLock { $0 }
      let process = { self.card.withLock { $0.process(payload) } }
      let reply = pause.map { $0.around(process, dropped: [0x6F, 0x00])! } ?? process()
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
