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
  /// With a cancel pending (`canceller`), it waits in slices and gives up once the key has had its grace to answer
  /// the cancel (`abandoned`).
  static func awaitReport(_ h: Handle, ms: Int32) -> Bool {
    let limit = ms < 0 ? h.context.readDeadlineMs : ms
    let end = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, limit)) * 1_000_000
    while true {
      // Looked at before every wait, not only after a silent slice: a key that ignores the cancel and goes on
      // sending KEEPALIVE every 100 ms is never silent for a slice.
      if h.context.canceller?.abandonDue == true {
        h.context.abandoned = true
        return false
      }
      let now = DispatchTime.now().uptimeNanoseconds
      let left = now >= end ? 0 : Int32(min(UInt64(Int32.max), (end - now + 999_999) / 1_000_000))
      let slice = h.context.canceller == nil ? left : min(left, 250)
      switch waitReadable(h.fd, limitMs: slice) {
      case .readable: return true
      case .failed:
        h.context.peerGone = true
        return false
      case .timedOut:
        if slice == left {
          h.context.timedOut = true
          return false
        }
      }
    }
  }

  /// Per-session state the callbacks see. Used only on the thread that runs the session's libfido2 call (the
  /// callbacks run synchronously inside it), so it needs no lock. The one exception is CTAPHID_CANCEL, which
  /// `FIDO2Canceller` writes (`fido_dev_cancel`) from another thread: a write touches no state here but `timedOut`
  /// and `peerGone` when it fails, and a failed cancel is not looked at.
  final class Context {
    /// Upper bound of one read when libfido2 passes no timeout (ms < 0), in milliseconds.
    var readDeadlineMs: Int32
    /// Called once when the key sends KEEPALIVE with status UP_NEEDED (CTAP 2.1 §11.2.9.2.1): libfido2 drops
    /// keepalives, but they pass through the read callback first, so the user is told to touch the key when the key
    /// asks, not before.
    var touchCue: (() -> Void)?
    /// The last read or send ended because the key said (or took) nothing before the deadline, not because the
    /// transport failed.
    var timedOut = false
    /// The key hung up (end of stream, a socket or device error): it was unplugged or its process ended.
    var peerGone = false
    /// The session's canceller while an operation it may cancel runs (nil otherwise), and whether the last read
    /// gave up on a key that did not answer a cancel.
    var canceller: FIDO2Canceller?
    var abandoned = false

    init(readDeadlineMs: Int32) { self.readDeadlineMs = readDeadlineMs }

    /// The capability flags of the key's answer to our CTAPHID_INIT (CTAP 2.1 §11.2.9.1.3): libfido2 clears its
    /// copy of FIDO_CAP_CBOR when the getInfo inside its open fails, so the key's own word is kept here.
    var initCapabilities: UInt8?
    /// The nonce of the CTAPHID_INIT libfido2 sent last, and the channel the key gave in answer to it. A hidraw
    /// node hands every reader every report, other programs' too: only our channel's KEEPALIVE is a cue for us.
    var initNonce: [UInt8]?
    var channel: [UInt8]?

    /// A report libfido2 sent (64 bytes, channel first): only a CTAPHID_INIT's nonce is kept (offset 7, 8 bytes).
    /// Runs on the session's thread (a CANCEL from another thread is no INIT and changes nothing).
    func sent(_ report: UnsafeBufferPointer<UInt8>) {
      guard report.count >= 15, report[4] == Self.initialize else { return }
      initNonce = Array(report[7..<15])
      channel = nil
    }

    /// A report the key sent (64 bytes, channel first). Only this is looked at (libfido2 reads and checks every
    /// report): the answer to our INIT (command 0x86, payload: nonce 8, channel 4, versions 4, capabilities 1 at
    /// report offset 23; §11.2.9.1.3) and a KEEPALIVE's status on our channel (command 0xBB, status at offset 7;
    /// §11.2.9.2.1).
    func received(_ report: UnsafeBufferPointer<UInt8>) {
      guard report.count >= 24 else { return }
      if report[4] == Self.initialize {
        guard let nonce = initNonce, Array(report[7..<15]) == nonce else { return }  // another program's INIT
        channel = Array(report[15..<19])
        initCapabilities = report[23]
        return
      }
      guard report[4] == Self.keepalive, report[7] == Self.upNeeded, let cue = touchCue,
        channel == nil || Array(report[0..<4]) == channel
      else { return }
      touchCue = nil  // once per operation
      cue()
    }

    static let initialize: UInt8 = 0x86
    static let keepalive: UInt8 = 0xBB
    static let upNeeded: UInt8 = 2
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
