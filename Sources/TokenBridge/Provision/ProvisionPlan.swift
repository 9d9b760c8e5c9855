import SystemCrypto
import FoundationEssentials
import Platform
import TokenDevices
import UAFCore

/// One line of a provisioning plan: who gets a token, optionally which one (`serial`), of which kind, and an
/// out-of-band registration payload issued for that user (a link or a QR code's text; without one the server is asked
/// for a registration of `username`, as `tokenbridge register` does).
public struct ProvisionRow: Equatable, Sendable, Codable {
  /// The row's number in the plan, from 1 (the header is not counted): the journal's key of the row.
  public var number: Int
  public var username: String
  /// A PIV card's serial (decimal) or a token id from `tokenbridge tokens` (a FIDO2 key without a USB serial).
  public var serial: String?
  public var kind: TokenKind?
  public var payload: String?
}

/// Why a plan cannot be used. `line` is the file's line (the header is line 1).
public enum ProvisionPlanError: Error, Equatable, Sendable {
  case empty
  case notText
  case tooLarge(limit: Int)
  case missingUsernameColumn
  case unknownColumn(String)
  case duplicateColumn(String)
  case unterminatedQuote(line: Int)
  case strayQuote(line: Int)
  case fieldCount(line: Int, expected: Int, got: Int)
  case emptyUsername(line: Int)
  case tooLong(line: Int, column: String, limit: Int)
  case controlCharacter(line: Int, column: String)
  case badKind(line: Int, value: String)
  case duplicateSerial(line: Int, serial: String)
  case noRows
  case tooManyRows(limit: Int)
}

/// A provisioning plan: a CSV file (RFC 4180: comma separated, fields in double quotes may hold commas, quotes
/// doubled and line breaks; CRLF or LF; a UTF-8 byte-order mark is skipped) whose header names the columns:
/// `username` (required), `serial`, `kind` (`piv` or `fido2`), `payload`; any other column is refused, so a typo
/// never silently drops what it named.
public struct ProvisionPlan: Equatable, Sendable {
  public var rows: [ProvisionRow]

  public static let columns = ["username", "serial", "kind", "payload"]
  public static let maxBytes = 4 << 20
  public static let maxRows = 10_000
  /// A username is at most 128 characters (UAF Protocol §3.4.2, as the server's requests); a payload 16 KiB.
  static let limits = ["username": 128, "serial": 128, "kind": 8, "payload": 16_384]

  public init(rows: [ProvisionRow]) { self.rows = rows }

  public init(csv bytes: [UInt8]) throws(ProvisionPlanError) {
    guard bytes.count <= Self.maxBytes else { throw .tooLarge(limit: Self.maxBytes) }
    var body = bytes[...]
    if body.starts(with: [0xEF, 0xBB, 0xBF]) { body = body.dropFirst(3) }
    guard let text = String(validating: body, as: UTF8.self) else { throw .notText }
    let records = try Self.records(text)
    guard let header = records.first, !(header.fields.count == 1 && header.fields[0].isEmpty) else { throw .empty }
    var index: [String: Int] = [:]
    for (i, raw) in header.fields.enumerated() {
      let name = Trim.whitespace(raw, newlines: false).lowercased()
      guard Self.columns.contains(name) else { throw .unknownColumn(UntrustedText.displayable(raw)) }
      guard index[name] == nil else { throw .duplicateColumn(name) }
      index[name] = i
    }
    guard let userColumn = index["username"] else { throw .missingUsernameColumn }
    var rows: [ProvisionRow] = []
    var serials: Set<String> = []
    for record in records.dropFirst() {
      if record.fields.count == 1 && record.fields[0].isEmpty { continue }  // a blank line
      guard record.fields.count == header.fields.count else {
        throw .fieldCount(line: record.line, expected: header.fields.count, got: record.fields.count)
      }
      var values: [String: String] = [:]
      for (name, i) in index {
        let v = Trim.whitespace(record.fields[i], newlines: false)
        if let limit = Self.limits[name], v.count > limit {
          throw .tooLong(line: record.line, column: name, limit: limit)
        }
        if v.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
          throw .controlCharacter(line: record.line, column: name)
        }
        if !v.isEmpty { values[name] = v }
      }
      guard let username = values["username"] else { throw .emptyUsername(line: record.line) }
      _ = userColumn
      var kind: TokenKind?
      if let k = values["kind"] {
        guard let parsed = TokenKind(rawValue: k.lowercased()) else {
          throw .badKind(line: record.line, value: UntrustedText.displayable(k))
        }
        kind = parsed
      }
      if let s = values["serial"] {
        guard serials.insert(s).inserted else {
          throw .duplicateSerial(line: record.line, serial: UntrustedText.displayable(s))
        }
      }
      rows.append(
        ProvisionRow(
          number: rows.count + 1, username: username, serial: values["serial"], kind: kind, payload: values["payload"]))
      guard rows.count <= Self.maxRows else { throw .tooManyRows(limit: Self.maxRows) }
    }
    guard !rows.isEmpty else { throw .noRows }
    self.rows = rows
  }

  /// The CSV's records, each with the line it starts on.
  static func records(_ text: String) throws(ProvisionPlanError) -> [(line: Int, fields: [String])] {
    var out: [(line: Int, fields: [String])] = []
    var fields: [String] = []
    var field = ""
    var line = 1
    var start = 1
    var quoted = false
    var wasQuoted = false
    var scalars = text.unicodeScalars.makeIterator()
    var pending: Unicode.Scalar? = nil
    func next() -> Unicode.Scalar? {
      if let p = pending {
        pending = nil
        return p
      }
      return scalars.next()
    }
    while let c = next() {
      if quoted {
        if c == "\"" {
          if let n = next() {
            if n == "\"" {
              field.unicodeScalars.append("\"")
            } else {
              quoted = false
              pending = n
            }
          } else {
            quoted = false
          }
        } else {
          if c == "\n" { line += 1 }
          field.unicodeScalars.append(c)
        }
        continue
      }
      switch c {
      case "\"":
        guard field.isEmpty && !wasQuoted else { throw .strayQuote(line: line) }
        quoted = true
        wasQuoted = true
      case ",":
        fields.append(field)
        field = ""
        wasQuoted = false
      case "\r":
        if let n = next(), n != "\n" { pending = n }
        fallthrough
      case "\n":
        fields.append(field)
        out.append((start, fields))
        fields = []
        field = ""
        wasQuoted = false
        line += 1
        start = line
      default:
        guard !wasQuoted else { throw .strayQuote(line: line) }
        field.unicodeScalars.append(c)
      }
    }
    if quoted { throw .unterminatedQuote(line: start) }
    if !field.isEmpty || !fields.isEmpty || wasQuoted {
      fields.append(field)
      out.append((start, fields))
    }
    return out
  }

  /// A digest of the rows (what the journal was made for): a rerun with another plan is refused.
  public var digest: String {
    var h = SHA256()
    for r in rows {
      for v in [r.username, r.serial ?? "", r.kind?.rawValue ?? "", r.payload ?? ""] {
        h.update(data: Array(v.utf8) + [0])
      }
      h.update(data: [1])
    }
    return Hex.lowercase(h.finalize())
  }
}
