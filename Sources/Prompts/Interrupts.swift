import Dispatch
import FoundationEssentials
import Platform
import Synchronization
import TokenBridge

#if canImport(Glibc)
  import Glibc
#endif

/// The one SIGINT handler of the program, in two stages.
/// - From the start of a command: a plain signal handler that says "interrupted" and ends the program (130, as a
///   shell does). Nothing is to be put back then, and a handler this simple needs no thread: a command that
///   never prompts on a terminal, never runs pinentry and never waits for a touch (a script's `--pin-fd` PIV
///   command) starts no dispatch thread at all: a second thread makes every munmap/mprotect a cross-CPU TLB flush
///   (docs/performance.md).
/// - Once something is to be put back or cancelled (`arm()`: a prompt turns echo off, a pinentry dialog, tokens
///   that wait for a touch): the handler writes a byte to a pipe, and the pipe's dispatch source (never an
///   async-signal context) acts on it, in order: puts the terminal back if a prompt turned echo off (and ends as
///   cancelled, 3); cancels a FIDO2 operation waiting for a touch (the command then ends as cancelled); else ends
///   the program (130).
package final class Interrupts: Sendable {
  package struct Echo {
    var fd: Int32
    var saved: termios
  }

  package static let shared = Interrupts()
  package let echo = Mutex<Echo?>(nil)
  package let source = Mutex<DispatchSourceRead?>(nil)
  /// What cancels an operation waiting on a token (set once the command has its tokens).
  package let cancellers = Mutex<[Canceller]>([])
  /// A pinentry dialog is up.
  package let pinentryActive = Mutex(false)
  /// What a Ctrl-C tells the pinentry dialog that is up.
  package let pinentryCancellation = Mutex<PinentryCancellation?>(nil)
  /// A pinentry dialog ended as cancelled: the command is ending as the user's cancel (3). The Ctrl-C that ended
  /// it may reach the handler only after the dialog is over; it must not turn that into "interrupted" (130).
  package let pinentryCancelled = Mutex(false)

  /// The first stage (see the type's comment).
  package static func install() { signal(SIGINT, interruptedBeforeArming) }

  /// The second stage: from here on SIGINT goes to the dispatch source. Call it before the state it protects
  /// exists (before echo goes off), so that no Ctrl-C falls between the two.
  ///
  /// The handler is swapped in one step and only writes to the pipe, so no Ctrl-C is lost while the source is
  /// being set up: the byte waits in the pipe. (On Linux a dispatch signal source is a signalfd that libdispatch
  /// sets up on its manager thread some time after `resume()`, with a handler of its own that re-raises the signal
  /// to that thread; a SIGINT before then met the SIG_IGN its documentation asks for and was lost.) A process out
  /// of descriptors stays at the first stage: Ctrl-C then ends it (130).
  package func arm() {
    source.withLock { s in
      guard s == nil else { return }
      var fds: [Int32] = [-1, -1]
      guard pipe(&fds) == 0 else { return }
      for fd in fds {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
      }
      let reader = fds[0]
      interruptPipe.store(fds[1], ordering: .sequentiallyConsistent)
      let src = DispatchSource.makeReadSource(fileDescriptor: reader, queue: DispatchQueue(label: "tokenbridge.sigint"))
      src.setEventHandler { [self] in
        var bytes = [UInt8](repeating: 0, count: 64)
        while Glibc.read(reader, &bytes, bytes.count) > 0 {}
        interrupted()
      }
      src.resume()
      signal(SIGINT, interruptedAfterArming)
      s = src
    }
  }

  package func interrupted() {
    if var e = echo.withLock({ $0 }) {
      tcsetattr(e.fd, TCSANOW, &e.saved)
      _ = Glibc.write(e.fd, "\n", 1)
      exit(3)
    }
    // A pinentry is asking: it shares our terminal (process group), got the same Ctrl-C and ends its dialog
    // as cancelled (or dies of it): the prompt then ends as the user's cancel (3), its terminal restored by it.
    // One that does not (it stopped reading, or runs elsewhere) is stopped by the dialog after a grace period:
    // the same cancel (3).
    if pinentryActive.withLock({ $0 }) {
      pinentryCancellation.withLock { $0?.request() }
      return
    }
    if pinentryCancelled.withLock({ $0 }) { return }
    // Cancel whatever waits (each canceller does nothing when its key is not in an operation).
    let cancelled = cancellers.withLock { $0.map { $0.cancel() } }.contains(true)
    if cancelled { return }
    FileIO.writeError("\ntokenbridge: interrupted\n")
    exit(130)
  }

  /// The tokens of this command: Ctrl-C cancels what waits on them.
  package func cancel(with list: [Canceller]) {
    if !list.isEmpty { arm() }
    cancellers.withLock { $0 = list }
  }

  /// A prompt is turning echo off on `fd`: put `saved` back if interrupted.
  package func echoOff(fd: Int32, saved: termios) {
    arm()
    echo.withLock { $0 = Echo(fd: fd, saved: saved) }
  }
  package func echoRestored() { echo.withLock { $0 = nil } }

  /// Runs a pinentry dialog: Ctrl-C meanwhile is left to the pinentry, then to `cancellation` (the dialog stops
  /// a program that did not end it).
  package func duringPinentry<T>(_ cancellation: PinentryCancellation, _ body: () throws -> T) rethrows -> T {
    arm()
    pinentryCancellation.withLock { $0 = cancellation }
    pinentryActive.withLock { $0 = true }
    defer {
      pinentryActive.withLock { $0 = false }
      pinentryCancellation.withLock { $0 = nil }
    }
    do {
      return try body()
    } catch InteractionError.cancelled {
      pinentryCancelled.withLock { $0 = true }
      throw InteractionError.cancelled
    }
  }
}

/// The write end of the second stage's pipe (-1 before `arm()`), read by its handler.
private let interruptPipe = Atomic<Int32>(-1)

/// The second stage's handler: async-signal-safe (an atomic load and write only). A full pipe drops the byte,
/// but the ones in it already wake the source.
private func interruptedAfterArming(_: Int32) {
  let saved = errno
  var byte: UInt8 = 1
  _ = Glibc.write(interruptPipe.load(ordering: .sequentiallyConsistent), &byte, 1)
  errno = saved
}

/// The first stage's handler: async-signal-safe (write and _exit only).
private func interruptedBeforeArming(_: Int32) {
  let message: StaticString = "\ntokenbridge: interrupted\n"
  _ = Glibc.write(2, message.utf8Start, message.utf8CodeUnitCount)
  _exit(130)
}
