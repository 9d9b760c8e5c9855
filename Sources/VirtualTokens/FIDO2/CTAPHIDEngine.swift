import Foundation
import Synchronization

/// The CTAPHID message layer (CTAP 2.1 §11.2) of one virtual key, independent of the transport: 64-byte
/// reports in, 64-byte reports out. The Unix-socket server (`CTAPHIDServer`) and the USB/IP HID function
/// (`FIDOHIDFunction`) both feed it; channels are per device, message assembly per open ("port").
public final class CTAPHIDEngine: Sendable {
  static let broadcast: UInt32 = 0xFFFF_FFFF
  public let key: VirtualFIDO2Key
  let log: @Sendable (String) -> Void
  /// The channels INIT allocated since power-up, and the next one to allocate.
  let channels = Mutex((open: Set<UInt32>(), next: UInt32(1)))
  /// One request at a time across all ports (a real key has one processor).
  let busy = Mutex(())
  let settings = Mutex(Settings())

  struct Settings {
    var logRequests = false
    var pause: RequestPause?
    var latency = LatencyProfile.none
  }

  /// Log every complete CTAPHID request (`Tools/bench` counts them).
  public var logRequests: Bool {
    get { settings.withLock { $0.logRequests } }
    set { settings.withLock { $0.logRequests = newValue } }
  }
  /// Test hook: cuts a flow at its k-th CTAPHID message (`RequestPause`).
  public var pause: RequestPause? {
    get { settings.withLock { $0.pause } }
    set { settings.withLock { $0.pause = newValue } }
  }
  /// How long the key takes to answer each CTAP command (`LatencyProfile`; none by default). The wait holds `busy`,
  /// as a real key's one processor is busy meanwhile.
  public var latency: LatencyProfile {
    get { settings.withLock { $0.latency } }
    set { settings.withLock { $0.latency = newValue } }
  }

  public init(key: VirtualFIDO2Key, log: @escaping @Sendable (String) -> Void) {
    self.key = key
    self.log = log
  }

  /// Power cycle: channels and the key's volatile state are gone; `whileOff` runs with no request running
  /// (the transport drops its connections there).
  public func powerCycle(whileOff: () -> Void = {}) {
    busy.withLock { _ in
      whileOff()
      channels.withLock { $0.open = [] }
      key.powerCycle()
    }
  }

  /// One open of the device: reassembles requests and sends replies as reports through `emit`.
  public final class Port: Sendable {
    let engine: CTAPHIDEngine
    let emit: @Sendable ([UInt8]) -> Void
    let worker: DispatchQueue
    /// The request being reassembled from its frames (the reading thread's, in `receive`).
    let pending = Mutex<Message?>(nil)
    /// CBOR requests queued on or running on `worker` (the reading thread adds, the worker takes away).
    let onWorker = Atomic(0)
    /// Frames of replies held back while a request is under the test hook (`RequestPause`), nil when none is; its
    /// lock also keeps the frames of one reply together.
    let held = Mutex<[[UInt8]]?>(nil)

    struct Message {
      var cid: UInt32
      var cmd: UInt8
      var total: Int
      var data: [UInt8]
      var seq: UInt8
    }

    enum Assembly {
      case incomplete
      case complete(Message)
      case outOfSequence
    }

    init(engine: CTAPHIDEngine, emit: @escaping @Sendable ([UInt8]) -> Void) {
      self.engine = engine
      self.emit = emit
      worker = DispatchQueue(label: "ctaphid-worker")
    }

    /// The host went away: its request waiting for a touch ends now (another port's goes on); returns once no
    /// request of this port runs.
    public func close() {
      engine.key.cancel(port: ObjectIdentifier(self), channel: nil)
      worker.sync {}
    }

    /// One output report (64 bytes; a 65-byte write with a leading report ID 0 is accepted, as hidraw sends).
    public func receive(_ report: [UInt8]) {
      var frame = report
      if frame.count == 65 && frame[0] == 0 { frame.removeFirst() }
      guard frame.count == 64 else { return }
      let cid = UInt32(frame[0]) << 24 | UInt32(frame[1]) << 16 | UInt32(frame[2]) << 8 | UInt32(frame[3])
      let initial = frame[4] & 0x80 != 0
      let total = Int(frame[5]) << 8 | Int(frame[6])
      if initial {
        if frame[4] == 0x91 {  // CANCEL: no reply; this channel's request waiting for a touch ends with KEEPALIVE_CANCEL
          engine.key.cancel(port: ObjectIdentifier(self), channel: cid)
          return
        }
        guard total <= 7609 else { return sendError(cid, 0x03) }
      }
      let assembly = pending.withLock { pending -> Assembly in
        if initial {
          pending = Message(cid: cid, cmd: frame[4], total: total, data: Array(frame[7..<min(64, 7 + total)]), seq: 0)
        } else {
          guard var p = pending, p.cid == cid, frame[4] == p.seq else {
            pending = nil
            return .outOfSequence
          }
          p.data += frame[5..<min(64, 5 + p.total - p.data.count)]
          p.seq += 1
          pending = p
        }
        guard let p = pending, p.data.count >= p.total else { return .incomplete }
        pending = nil
        return .complete(p)
      }
      switch assembly {
      case .incomplete: return
      case .outOfSequence: return sendError(cid, 0x04)  // INVALID_SEQ
      case .complete(let p):
        // CBOR requests that may wait for a touch run on a worker, so CANCEL frames are still read meanwhile.
        // getInfo and clientPIN never wait for one: with nothing on the worker they are answered here, without
        // a hop to another thread (two of a key listing's three requests; a benchmark's simulators share the
        // CPUs with the client they serve).
        let mayWaitForTouch = p.data.first != 0x04 && p.data.first != 0x06
        if p.cmd == 0x90 && (mayWaitForTouch || onWorker.load(ordering: .sequentiallyConsistent) > 0) {
          onWorker.add(1, ordering: .sequentiallyConsistent)
          worker.async { [self] in
            handle(p.cid, p.cmd, p.data)
            onWorker.subtract(1, ordering: .sequentiallyConsistent)
          }
        } else {
          handle(p.cid, p.cmd, p.data)
        }
      }
    }

    func handle(_ cid: UInt32, _ cmd: UInt8, _ data: [UInt8]) {
      guard let pause = engine.pause else { return process(cid, cmd, data) }
      // The reply is held until the pause ends: with `after`, the request was processed and its answer is lost.
      held.withLock { $0 = [] }
      _ = pause.around({ process(cid, cmd, data) }, dropped: ())
      let frames = held.withLock { held in
        defer { held = nil }
        return held ?? []
      }
      for f in frames { emit(f) }
    }

    func process(_ cid: UInt32, _ cmd: UInt8, _ data: [UInt8]) {
      if engine.logRequests {
        var sub = cmd == 0x90 ? String(format: " ctap=0x%02x", data.first ?? 0) : ""
        // clientPIN's subCommand (key 2), so a benchmark can tell getPINRetries (0x01) from the others.
        if cmd == 0x90, data.first == 0x06, let p = try? CBOR.decode(Array(data.dropFirst())),
          let subCommand = p[int: 2]?.int
        {
          sub += String(format: " clientPIN=0x%02x", subCommand)
        }
        engine.log(String(format: "request cmd=0x%02x", cmd) + sub)
      }
      if cmd == 0x86 {  // INIT
        guard data.count == 8 else { return sendError(cid, 0x03) }
        var newCID = cid
        if cid == CTAPHIDEngine.broadcast { newCID = engine.allocateChannel() }
        let body = data + bigEndian(newCID) + [2, 0, 2, 1, 0x01 | 0x04 | 0x08]  // WINK|CBOR|NMSG
        return send(cid, 0x86, body)
      }
      guard cid != CTAPHIDEngine.broadcast, cid != 0, engine.channels.withLock({ $0.open.contains(cid) }) else {
        return sendError(cid, 0x0B)  // INVALID_CHANNEL
      }
      switch cmd {
      case 0x81: send(cid, 0x81, data)  // PING
      case 0x88: send(cid, 0x88, [])  // WINK
      case 0x90:  // CBOR
        let (key, engine) = (engine.key, engine)
        let requester = VirtualFIDO2Key.Requester(port: ObjectIdentifier(self), channel: cid)
        let reply = engine.busy.withLock { _ in
          let reply = key.serving(requester) {
            key.handle(data, waitingForTouch: { [weak self] in self?.send(cid, 0xBB, [2]) })  // KEEPALIVE UP_NEEDED
          }
          LatencyProfile.wait(engine.latency.fido2Delay(data))
          return reply
        }
        send(cid, 0x90, reply)
      default: sendError(cid, 0x01)  // INVALID_CMD (MSG too: no U2F, NMSG is set)
      }
    }

    func sendError(_ cid: UInt32, _ code: UInt8) { send(cid, 0xBF, [code]) }

    /// Splits a reply into an init frame (57 bytes of data) and continuation frames (59 each), zero padded.
    func send(_ cid: UInt32, _ cmd: UInt8, _ data: [UInt8]) {
      let cidBytes = bigEndian(cid)
      var frames: [[UInt8]] = [cidBytes + [cmd, UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data.prefix(57)]
      var offset = min(57, data.count)
      var seq: UInt8 = 0
      while offset < data.count {
        let chunk = data[offset..<min(offset + 59, data.count)]
        frames.append(cidBytes + [seq] + chunk)
        offset += chunk.count
        seq += 1
      }
      held.withLock { held in
        for f in frames {
          let report = f + [UInt8](repeating: 0, count: 64 - f.count)
          if held != nil { held?.append(report) } else { emit(report) }
        }
      }
    }
  }

  public func openPort(emit: @escaping @Sendable ([UInt8]) -> Void) -> Port { Port(engine: self, emit: emit) }

  func allocateChannel() -> UInt32 {
    channels.withLock { c in
      let n = c.next
      c.next = c.next &+ 1 == Self.broadcast ? 1 : c.next &+ 1
      c.open.insert(n)
      return n
    }
  }
}
