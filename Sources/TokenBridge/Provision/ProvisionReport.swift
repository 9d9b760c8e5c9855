import FoundationEssentials
import Platform

#if canImport(Glibc)
  import Glibc
#endif

/// The report of a provisioning run, made from the journal: one entry per plan row, in plan order, and a summary.
/// JSON: `{"rows":[{"username","serial","kind","aaid","keyID","status","error","seconds","sealedPin","note"}],
/// "summary":{…}}` with every key present (`null` when there is nothing); the CSV holds the same scalar fields, the
/// error as `errorCode` and `errorMessage`. No PIN in either: `sealedPin` is age's armored ciphertext.
public struct ProvisionReport: Encodable, Sendable, Equatable {
  public struct RowError: Encodable, Sendable, Equatable {
    public var code: Int
    public var message: String
  }

  public struct Row: Encodable, Sendable, Equatable {
    public var username: String
    public var serial: String?
    public var kind: String?
    public var aaid: String?
    public var keyID: String?
    /// `done`, `failed` or `pending` (no token, or not reached yet).
    public var status: String
    public var error: RowError?
    public var seconds: Double
    public var sealedPin: String?
    public var note: String?

    enum CodingKeys: String, CodingKey {
      case username, serial, kind, aaid, keyID, status, error, seconds, sealedPin, note
    }

    public func encode(to encoder: Encoder) throws {
      var c = encoder.container(keyedBy: CodingKeys.self)
      try c.encode(username, forKey: .username)
      try c.encode(serial, forKey: .serial)
      try c.encode(kind, forKey: .kind)
      try c.encode(aaid, forKey: .aaid)
      try c.encode(keyID, forKey: .keyID)
      try c.encode(status, forKey: .status)
      try c.encode(error, forKey: .error)
      try c.encode(seconds, forKey: .seconds)
      try c.encode(sealedPin, forKey: .sealedPin)
      try c.encode(note, forKey: .note)
    }
  }

  public struct Summary: Encodable, Sendable, Equatable {
    public var rows: Int
    public var done: Int
    public var failed: Int
    public var pending: Int
    /// Tokens present that no row took (left alone).
    public var unusedTokens: [String]
    public var seconds: Double
  }

  public var rows: [Row]
  public var summary: Summary

  public var isComplete: Bool { summary.done == summary.rows }

  init(rows journal: [ProvisionJournalRow], unused: [String]) {
    rows = journal.map { j in
      let status = j.stage == .done ? "done" : (j.failed ? "failed" : "pending")
      let kind = j.sideID.map { $0.hasPrefix("fido2-") ? "fido2" : "piv" } ?? j.row.kind?.rawValue
      return Row(
        username: j.row.username, serial: j.shownSerial ?? j.row.serial, kind: kind, aaid: j.aaid, keyID: j.keyID,
        status: status,
        error: j.failed ? j.errorCode.map { RowError(code: $0, message: j.errorMessage ?? "") } : nil,
        seconds: (j.seconds * 1000).rounded() / 1000, sealedPin: j.sealedPin, note: j.note)
    }
    let done = rows.filter { $0.status == "done" }.count
    let failed = rows.filter { $0.status == "failed" }.count
    summary = Summary(
      rows: rows.count, done: done, failed: failed, pending: rows.count - done - failed, unusedTokens: unused,
      seconds: (journal.map(\.seconds).reduce(0, +) * 1000).rounded() / 1000)
  }

  public static let csvColumns = [
    "username", "serial", "kind", "aaid", "keyID", "status", "errorCode", "errorMessage", "seconds", "sealedPin",
    "note",
  ]

  /// RFC 4180: a header, then one record per row; a field with a comma, a quote or a line break is quoted (the
  /// armored sealed PIN spans lines), quotes doubled; CRLF line ends.
  public var csv: String {
    func field(_ s: String?) -> String {
      guard let s else { return "" }
      if s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) {
        return "\"" + s.replacing("\"", with: "\"\"") + "\""
      }
      return s
    }
    var lines = [Self.csvColumns.joined(separator: ",")]
    for r in rows {
      lines.append(
        [
          r.username, r.serial, r.kind, r.aaid, r.keyID, r.status, r.error.map { String($0.code) }, r.error?.message,
          String(r.seconds), r.sealedPin, r.note,
        ].map(field).joined(separator: ","))
    }
    return lines.joined(separator: "\r\n") + "\r\n"
  }

  /// Writes `text` to `path` whole or not at all: a new 0600 file beside it (never through a link), synced, renamed
  /// over it.
  public static func write(_ text: String, to path: String) throws(InputError) {
    let temporary = path + ".tmp-\(getpid())"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw .file(path: path, errno: errno) }
    let ok = FileIO.write(fd, Array(text.utf8)) && fsync(fd) == 0
    let e = errno
    close(fd)
    guard ok, rename(temporary, path) == 0 else {
      let why = ok ? errno : e
      unlink(temporary)
      throw .file(path: path, errno: why)
    }
  }
}
