import FoundationEssentials
import Platform
import Synchronization
import TokenBridge
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// Asks through a pinentry program (gpg's helper: pinentry-gnome3, -qt, -curses, -tty) over the Assuan
/// protocol on its stdin/stdout. One program run per question, as gpg-agent does. A cancel (ERR 83886179, any
/// source) is the user's cancel (`InteractionError.cancelled`), not a failure; optional commands the program
/// refuses (OPTION, SETREPEAT, SETTIMEOUT) are done without. The PIN arrives percent-encoded on D lines: it is
/// decoded into a buffer reserved up front (no reallocation leaves a copy) and every buffer that held it is
/// wiped. The whole conversation is bounded by `timeout`, counted from the first dialog (a program that answers
/// at once, again and again, cannot make it last longer; each dialog's SETTIMEOUT is what is left); past it the
/// program is stopped and `.timedOut` thrown. Every write to and read from the program waits in `poll` within that
/// deadline (our end of its stdin is non-blocking: a program that stops reading cannot block us) and ends early on
/// `cancellation` (Ctrl-C).
public final class Pinentry {
  /// Assuan's line limit (without the newline).
  static let maxLine = 1000
  /// gpg-error codes (the low 16 bits of an Assuan ERR code; the source bits above vary by program).
  static let canceled: UInt32 = 99
  static let fullyCanceled: UInt32 = 198
  static let notConfirmed: UInt32 = 114
  static let timeout: UInt32 = 62

  public let program: String
  public let timeout: Double
  /// OPTION ttyname / ttytype / lc-ctype: where a terminal pinentry draws (nil: not sent).
  public var ttyName: String?
  public var ttyType: String?
  public var lcCtype: String?
  /// Set by Ctrl-C (`PinentryCancellation.request`).
  public let cancellation = PinentryCancellation()
  /// The end of the whole conversation: fixed when the first dialog starts.
  var conversationDeadline: ContinuousClock.Instant?
  /// For the fuzzer (`assuan` target): when set, each dialog talks over the descriptors it returns (the program's
  /// output to read, its input to write; the dialog closes both) instead of starting `program`.
  package var channel: (() -> (reading: Int32, writing: Int32))?

  public init(program: String, timeout: Double, ttyName: String? = nil, ttyType: String? = nil, lcCtype: String? = nil)
  {
    self.program = program
    self.timeout = min(max(timeout, 0), 86_400)
    self.ttyName = ttyName
    self.ttyType = ttyType
    self.lcCtype = lcCtype
  }

  /// Asks for a secret (twice for a new one). Throws `InteractionError.cancelled` / `.timedOut`,
  /// `InputError.pinentry`.
  public func getPin(_ dialog: PinentryDialog) throws -> Secret {
    let session = try Session(self)
    defer { session.finish() }
    try session.setUp(dialog.title)
    if let hint = dialog.constraintsHint { _ = try session.optional("OPTION constraints-hint-short=\(escape(hint))") }
    try session.required("SETDESC \(escape(dialog.description))")
    try session.required("SETPROMPT \(escape(dialog.prompt))")
    if let e = dialog.error { try session.required("SETERROR \(escape(e))") }
    var askTwice = false
    if let again = dialog.repeatPrompt {
      askTwice = try !session.optional("SETREPEAT \(escape(again))")
      if !askTwice { _ = try session.optional("SETREPEATERROR \(escape(dialog.repeatError))") }
    }
    let first = try session.getPin()
    guard askTwice, let again = dialog.repeatPrompt else { return first }
    // The program has no SETREPEAT: the same dialog again, with the repeat prompt, and compare here.
    for _ in 0..<3 {
      try session.required("SETPROMPT \(escape(again))")
      let second = try session.getPin()
      if second.bytes == first.bytes { return first }
      try session.required("SETERROR \(escape(dialog.repeatError))")
      try session.required("SETPROMPT \(escape(dialog.prompt))")
      let retry = try session.getPin()
      first.replace(with: retry)
    }
    throw InteractionError.cancelled
  }

  /// Asks a yes/no question (CONFIRM): true on OK, false when the user says no or cancels.
  public func confirm(title: String, description: String, ok: String, cancel: String) throws -> Bool {
    let session = try Session(self)
    defer { session.finish() }
    try session.setUp(title)
    try session.required("SETDESC \(escape(description))")
    _ = try session.optional("SETOK \(escape(ok))")
    _ = try session.optional("SETCANCEL \(escape(cancel))")
    switch try session.send("CONFIRM", data: nil) {
    case .ok: return true
    case .err(let code) where [Self.canceled, Self.fullyCanceled, Self.notConfirmed].contains(code & 0xFFFF):
      return false
    case .err(let code) where code & 0xFFFF == Self.timeout: throw InteractionError.timedOut
    case .err(let code): throw InputError.pinentry(.refused(program: program, command: "CONFIRM", code: code))
    }
  }

  /// Assuan percent-escaping of our text: `%`, CR, LF and other control bytes; cut to fit a line.
  func escape(_ s: String) -> String {
    var out: [UInt8] = []
    for b in s.utf8 {
      if out.count > Self.maxLine - 40 { break }
      if b == 0x25 || b < 0x20 || b == 0x7F {
        out += Array(("%" + Hex.digits(b, width: 2, uppercase: true)).utf8)
      } else {
        out.append(b)
      }
    }
    return String(decoding: out, as: UTF8.self)
  }

  enum Reply {
    case ok
    case err(UInt32)
  }
}

extension Secret {
  func reserve(_ n: Int) { mutate { $0.reserveCapacity(n) } }
  func append(_ b: UInt8) { mutate { $0.append(b) } }
  /// Takes `other`'s value (this one's old bytes wiped first).
  func replace(with other: Secret) {
    mutate {
      wipe(&$0)
      $0.removeAll(keepingCapacity: true)
      $0.append(contentsOf: other.bytes)
    }
  }
}
