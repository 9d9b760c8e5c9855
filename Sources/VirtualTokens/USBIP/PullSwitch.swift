import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Opt-in fault injection for the lab's pull sweep: pulls the device out at a chosen request, the way a user pulls a
/// token. A request is one PC_to_RDR_XfrBlock (an APDU or a part of a chained one) on the CCID interface or one
/// CTAPHID output report (interrupt OUT or SET_REPORT) on the FIDO HID interface.
///
/// - `unplugAfter`: the device is unplugged at the k-th request counted from the server's start.
/// - `controlPath`: arms the switch at run time without a restart: a file holding `K [processed|dropped]`, read and
///   removed at the next request, which is then request 1 of the count (`0` disarms).
/// - `processed`: the token runs the k-th request (its state changes are kept) and its answer is lost: the device is
///   gone before it reaches the host. `dropped`: the k-th request never reaches the token.
/// - `logPath`: one line appended per request (`ccid` + CLA INS P1 P2, `hid` + channel and command): the sweep counts
///   a flow's requests with it. No data beyond those headers is written: a VERIFY's PIN never reaches the log.
public final class PullSwitch: Sendable {
  public enum Mode: String, CaseIterable, Sendable {
    case processed, dropped
  }

  struct Armed {
    var remaining: Int?
    var mode: Mode
  }

  let armed: Mutex<Armed>
  let controlPath: String?
  let logPath: String?

  public init(unplugAfter: Int?, mode: Mode, controlPath: String?, logPath: String?) {
    armed = Mutex(Armed(remaining: unplugAfter, mode: mode))
    self.controlPath = controlPath
    self.logPath = logPath
  }

  /// Counts one request (`what` says what it is, for the log); the mode when the device goes now, else nil.
  func request(_ what: String) -> Mode? {
    armed.withLock { a in
      if let controlPath, let text = try? String(contentsOfFile: controlPath, encoding: .utf8) {
        unlink(controlPath)
        let words = text.split(whereSeparator: \.isWhitespace)
        if let k = words.first.flatMap({ Int($0) }) {
          a.remaining = k > 0 ? k : nil
          a.mode = words.count > 1 ? Mode(rawValue: String(words[1])) ?? a.mode : a.mode
        }
      }
      var cut: Mode?
      if let k = a.remaining {
        if k <= 1 {
          a.remaining = nil
          cut = a.mode
        } else {
          a.remaining = k - 1
        }
      }
      if let logPath {
        let line = what + (cut.map { " unplug=\($0.rawValue)" } ?? "") + "\n"
        let fd = open(logPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 {
          _ = Array(line.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
          close(fd)
        }
      }
      return cut
    }
  }

  static func hex(_ bytes: some Collection<UInt8>) -> String {
    bytes.map { String(format: "%02X", $0) }.joined(separator: " ")
  }

  /// The log's words for a CTAPHID report: channel, then `init` + command (+ CTAP command and clientPIN
  /// subcommand when the first frame shows them) or `cont` + sequence number.
  static func describeReport(_ report: [UInt8]) -> String {
    var frame = report
    if frame.count == 65 && frame[0] == 0 { frame.removeFirst() }
    guard frame.count >= 8 else { return "hid short" }
    let cid = hex(frame[0..<4]).replacingOccurrences(of: " ", with: "")
    guard frame[4] & 0x80 != 0 else { return "hid \(cid) cont \(frame[4])" }
    var words = "hid \(cid) init " + String(format: "%02X", frame[4])
    if frame[4] == 0x90 {
      words += String(format: " ctap=%02X", frame[7])
      // clientPIN {1: protocol, 2: subCommand, ...} as libfido2 and python-fido2 encode it (keys in order).
      if frame[7] == 0x06, frame.count > 12, frame[8] & 0xE0 == 0xA0, frame[9] == 0x01, frame[11] == 0x02 {
        words += String(format: " clientPIN=%02X", frame[12])
      }
    }
    return words
  }

  /// The log's words for a CCID XfrBlock: `ccid`, the level parameter, and the APDU header when it starts one.
  static func describeXfrBlock(_ message: [UInt8]) -> String {
    let level = UInt16(message[8]) | UInt16(message[9]) << 8
    let data = message.dropFirst(10)
    let starts = level == 0 || level == 1
    return "ccid level=\(level)" + (starts && data.count >= 4 ? " apdu=" + hex(data.prefix(4)) : "")
  }
}
