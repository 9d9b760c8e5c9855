import CFido2
import Dispatch

#if canImport(Glibc)
  import Glibc
#endif

/// What the two kinds of libfido2 custom I/O (`fido_dev_set_io_functions`) share: virtual keys over a socket
/// (`VirtualFIDOIO`) and hidraw keys (`HidrawFIDOIO`). libfido2 with custom I/O frames 64-byte HID reports: it
/// writes 65 bytes (report ID first) and reads 64 (dev.c `fido_dev_open_tx`: rx_len = tx_len = 64).
enum FIDO2IO {
  /// What an open callback hands libfido2 (boxed): the descriptor (a hidraw node or a socket) and the session's
  /// context. Both kinds of I/O use it; closing the descriptor ends the device (and releases a hidraw lock).
  final class Handle {
    let fd: Int32
    let context: Context
    init(fd: Int32, context: Context) {
      self.fd = fd
      self.context = context
    }
  }

  static let closeCallback: @convention(c) (UnsafeMutableRawPointer?) -> Void = { handle in
    guard let handle else { return }
    let h = Unmanaged<Handle>.fromOpaque(handle).takeRetainedValue()
    close(h.fd)
  }

  /// Waits for the next report on `h` within libfido2's `ms` (the context's deadline when it passes none, -1);
  /// false when none comes, with the context saying why (`timedOut`, or `peerGone` when the descriptor failed).
  static func awaitReport(_ h: Handle, ms: Int32) -> Bool {
    switch waitReadable(h.fd, limitMs: ms < 0 ? h.context.readDeadlineMs : ms) {
    case .readable: return true
    case .timedOut: h.context.timedOut = true
    case .failed: h.context.peerGone = true
    }
    return false
  }

  /// Per-session state the callbacks see. Used only on the thread that runs the session's libfido2 call (the
  /// callbacks run synchronously inside it), so it needs no lock.
  final class Context {
    /// Upper bound of one read when libfido2 passes no timeout (ms < 0), in milliseconds.
    var readDeadlineMs: Int32
    /// The last read or send ended because the key said (or took) nothing before the deadline, not because the
    /// transport failed.
    var timedOut = false
    /// The key hung up (end of stream, a socket or device error): it was unplugged or its process ended.
    var peerGone = false
    /// The getInfo response seen in the reads (the one libfido2 sends while opening, or any later one), parsed
    /// by `FIDO2GetInfo`; nil until one was seen complete and well-formed.
    var capturedInfo: FIDO2Info?

    /// CTAPHID reassembly of the response to the last request, when that request was getInfo.
    var capture: Reassembly?

    init(readDeadlineMs: Int32) { self.readDeadlineMs = readDeadlineMs }

    /// A report libfido2 sent (64 bytes, without the report ID). An initialization packet of CTAPHID_CBOR whose
    /// payload is the single byte 0x04 (authenticatorGetInfo) starts a capture of its response; any other
    /// request ends one. Continuation packets and CANCEL (written from another thread) change nothing.
    func sent(_ report: UnsafeBufferPointer<UInt8>) {
      guard report.count >= 8, report[4] & 0x80 != 0, report[4] != CTAPHID.cancel else { return }
      let length = Int(report[5]) << 8 | Int(report[6])
      capture =
        report[4] == CTAPHID.cbor && length == 1 && report[7] == 0x04
        ? Reassembly(channel: Array(report[0..<4]), command: CTAPHID.cbor) : nil
    }

    /// A report the key sent (64 bytes): the packets of a getInfo response are reassembled (KEEPALIVE passed over)
    /// and, once complete, parsed into `capturedInfo`.
    func received(_ report: UnsafeBufferPointer<UInt8>) {
      guard report.count >= 8, report[4] != CTAPHID.keepalive, var c = capture else { return }
      switch c.add(report) {
      case .more: capture = c
      case .done(let message):
        capture = nil
        // Status byte, then the CBOR map (CTAP 2.1 §8.1).
        if message.first == 0x00, let info = FIDO2GetInfo.parse(message.dropFirst()) { capturedInfo = info }
      case .failed: capture = nil
      }
    }
  }

  /// The CTAPHID command bytes (CTAP 2.1 §11.2.9; bit 7 set marks an initialization packet).
  enum CTAPHID {
    static let initialize: UInt8 = 0x86
    static let cbor: UInt8 = 0x90
    static let cancel: UInt8 = 0x91
    static let keepalive: UInt8 = 0xBB
    static let error: UInt8 = 0xBF
    /// CTAPHID_INIT's broadcast channel.
    static let broadcast: [UInt8] = [0xFF, 0xFF, 0xFF, 0xFF]
  }

  /// One CTAPHID message being reassembled from 64-byte reports: an initialization packet (channel, `command`,
  /// length, 57 bytes) and continuation packets (channel, sequence 0…127, 59 bytes). Reports of other channels
  /// are passed over; an initialization packet with another command (an error, 0xBF) fails the message.
  struct Reassembly {
    let channel: [UInt8]
    let command: UInt8
    var expected: Int?
    var sequence: UInt8 = 0
    var message: [UInt8] = []

    enum Step {
      case more
      case done([UInt8])
      case failed
    }

    mutating func add(_ report: UnsafeBufferPointer<UInt8>) -> Step {
      guard report.count == 64, Array(report[0..<4]) == channel else { return .more }  // another channel's
      if let expected {
        guard report[4] == sequence else { return .failed }
        sequence &+= 1
        message += report[5..<min(64, 5 + expected - message.count)]
      } else {
        guard report[4] == command else { return .failed }  // an error (0xBF) or another command
        let length = Int(report[5]) << 8 | Int(report[6])
        expected = length
        message += report[7..<min(64, 7 + length)]
      }
      return message.count >= expected ?? 0 ? .done(message) : .more
    }
  }

  /// The open callback gets only the path: the session hands its context over through the opening thread
  /// (a thread-specific value).
  static let contextKey: pthread_key_t = {
    var key = pthread_key_t()
    precondition(pthread_key_create(&key, nil) == 0, "no thread-specific key left")
    return key
  }()

  /// Runs `body` (which calls `fido_dev_open`) with `context` visible to the open callback on this thread.
  static func opening<T>(with context: Context, _ body: () -> T) -> T {
    let box = Unmanaged.passRetained(context)
    pthread_setspecific(contextKey, box.toOpaque())
    defer {
      pthread_setspecific(contextKey, nil)
      box.release()
    }
    return body()
  }

  /// The context `opening` handed over, inside an open callback.
  static func openingContext() -> Context? {
    guard let raw = pthread_getspecific(contextKey) else { return nil }
    return Unmanaged<Context>.fromOpaque(raw).takeUnretainedValue()
  }

  /// Polls until `fd` is readable or `limitMs` passed. Ctrl-C (our cancel handler) interrupts poll with EINTR:
  /// that is not the end of the key, so poll again for the time left (never longer than the limit in total).
  enum Wait { case readable, timedOut, failed }

  static func waitReadable(_ fd: Int32, limitMs: Int32) -> Wait {
    let end = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, limitMs)) * 1_000_000
    var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    while true {
      let now = DispatchTime.now().uptimeNanoseconds
      let left = now >= end ? 0 : Int32(min(UInt64(Int32.max), (end - now + 999_999) / 1_000_000))
      let ready = poll(&pfd, 1, left)
      if ready > 0 { return .readable }  // data, or a hang-up that the read then reports
      if ready == 0 { return .timedOut }
      if errno != EINTR { return .failed }
    }
  }
}
