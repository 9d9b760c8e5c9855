import CSQLite
import FoundationEssentials

/// A thin layer over SQLite's C API for the local data (a Swift wrapper such as GRDB pulls in full Foundation and
/// ICU's data: docs/performance.md). One connection, prepared statements, typed values, transactions. Values keep the
/// encodings GRDB wrote, so databases stay readable both ways: text, integers, Data as a blob, Date as text
/// "yyyy-MM-dd HH:mm:ss.SSS" in UTC (`SQLiteDate`).

/// A failure SQLite reported: its (extended) result code and its message, never the SQL that failed.
struct SQLiteError: Error, Equatable, Sendable {
  var code: Int32
  var message: String

  /// SQLITE_MISMATCH: a column held no value of the type read (a NULL in a required column, text that is no date).
  static func mismatch(_ message: String) -> SQLiteError { SQLiteError(code: SQLITE_MISMATCH, message: message) }
}

/// A value bound to a statement parameter.
enum SQLiteValue: Equatable, Sendable {
  case null
  case integer(Int64)
  case real(Double)
  case text(String)
  case blob([UInt8])
}

/// Something that binds as a statement parameter.
protocol SQLiteBindable {
  var sqliteValue: SQLiteValue { get }
}

extension Int: SQLiteBindable { var sqliteValue: SQLiteValue { .integer(Int64(self)) } }
extension Int32: SQLiteBindable { var sqliteValue: SQLiteValue { .integer(Int64(self)) } }
extension Int64: SQLiteBindable { var sqliteValue: SQLiteValue { .integer(self) } }
extension Double: SQLiteBindable { var sqliteValue: SQLiteValue { .real(self) } }
extension String: SQLiteBindable { var sqliteValue: SQLiteValue { .text(self) } }
extension Data: SQLiteBindable { var sqliteValue: SQLiteValue { .blob([UInt8](self)) } }
extension Array: SQLiteBindable where Element == UInt8 { var sqliteValue: SQLiteValue { .blob(self) } }
extension Date: SQLiteBindable { var sqliteValue: SQLiteValue { .text(SQLiteDate.text(self)) } }
extension SQLiteValue: SQLiteBindable { var sqliteValue: SQLiteValue { self } }
extension Optional: SQLiteBindable where Wrapped: SQLiteBindable {
  var sqliteValue: SQLiteValue { self?.sqliteValue ?? .null }
}

/// One connection. Not thread-safe by itself (opened SQLITE_OPEN_NOMUTEX): its owner keeps it in a `Mutex`, which
/// serializes every use (LocalData and ProvisionJournal do).
// @unchecked: a NOMUTEX sqlite3 handle, safe one thread at a time, which only the owner's Mutex (not a type) ensures.
final class SQLiteConnection: @unchecked Sendable {
  let handle: OpaquePointer

  /// Opens (creating if missing) the database at `path`. Readers and writers
  /// meeting a lock wait up to `busyTimeout` milliseconds; foreign keys are enforced.
  init(path: String, busyTimeout: Int32) throws(SQLiteError) {
    var h: OpaquePointer?
    let rc = sqlite3_open_v2(
      path, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
    guard rc == SQLITE_OK, let h else {
      let error = SQLiteError(code: rc, message: h.map { String(cString: sqlite3_errmsg($0)) } ?? Self.describe(rc))
      sqlite3_close_v2(h)
      throw error
    }
    handle = h
    sqlite3_extended_result_codes(h, 1)
    sqlite3_busy_timeout(h, busyTimeout)
    _ = csqlite_refuse_double_quoted_strings(h)
    try execute("PRAGMA foreign_keys = ON")
    // A file that is not a database fails here, at open, rather than at its first use.
    _ = try query("SELECT * FROM sqlite_master LIMIT 1") { _ throws(SQLiteError) in () }
  }

  deinit { sqlite3_close_v2(handle) }

  static func describe(_ code: Int32) -> String { String(cString: sqlite3_errstr(code)) }

  func error(_ code: Int32) -> SQLiteError {
    SQLiteError(code: sqlite3_extended_errcode(handle), message: String(cString: sqlite3_errmsg(handle)))
  }

  func prepare(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
    var s: OpaquePointer?
    let rc = sqlite3_prepare_v2(handle, sql, -1, &s, nil)
    guard rc == SQLITE_OK, let s else { throw error(rc) }
    return SQLiteStatement(s, connection: self)
  }

  /// Runs one statement with `arguments` bound to its parameters, to completion.
  func execute(_ sql: String, _ arguments: any SQLiteBindable...) throws(SQLiteError) {
    let statement = try prepare(sql)
    try statement.bind(arguments)
    while try statement.step() {}
  }

  /// Runs several statements separated by semicolons, without parameters (migrations).
  func executeScript(_ sql: String) throws(SQLiteError) {
    let rc = sqlite3_exec(handle, sql, nil, nil, nil)
    guard rc == SQLITE_OK else { throw error(rc) }
  }

  /// Every row of one statement, each made by `row`.
  func query<T>(
    _ sql: String, _ arguments: any SQLiteBindable..., row: (SQLiteRow) throws(SQLiteError) -> T
  ) throws(SQLiteError) -> [T] {
    let statement = try prepare(sql)
    try statement.bind(arguments)
    var rows: [T] = []
    while try statement.step() { rows.append(try row(SQLiteRow(statement: statement.handle))) }
    return rows
  }

  /// The first row's first column as an integer (nil: no row, or NULL).
  func integer(_ sql: String, _ arguments: any SQLiteBindable...) throws(SQLiteError) -> Int64? {
    let statement = try prepare(sql)
    try statement.bind(arguments)
    guard try statement.step() else { return nil }
    return SQLiteRow(statement: statement.handle).optionalInteger(0)
  }

  /// Rows changed by the last INSERT, UPDATE or DELETE.
  var changes: Int { Int(sqlite3_changes(handle)) }

  enum TransactionKind: String {
    /// Takes the write lock at BEGIN: a writer never fails half-way for a lock another writer holds.
    case immediate = "IMMEDIATE"
    /// Takes locks as statements need them: a reader's consistent snapshot.
    case deferred = "DEFERRED"
  }

  /// `body` in one transaction: committed when it returns, rolled back when it throws (its error is rethrown).
  func transaction<T>(_ kind: TransactionKind, _ body: () throws -> T) throws -> T {
    try execute("BEGIN \(kind.rawValue) TRANSACTION")
    let result: T
    do { result = try body() } catch {
      if sqlite3_get_autocommit(handle) == 0 { try? execute("ROLLBACK TRANSACTION") }
      throw error
    }
    do { try execute("COMMIT TRANSACTION") } catch {
      if sqlite3_get_autocommit(handle) == 0 { try? execute("ROLLBACK TRANSACTION") }
      throw error
    }
    return result
  }
}

/// A prepared statement, finalized when released.
final class SQLiteStatement {
  let handle: OpaquePointer
  let connection: SQLiteConnection

  init(_ handle: OpaquePointer, connection: SQLiteConnection) {
    self.handle = handle
    self.connection = connection
  }

  deinit { sqlite3_finalize(handle) }

  func bind(_ arguments: [any SQLiteBindable]) throws(SQLiteError) {
    guard arguments.count == Int(sqlite3_bind_parameter_count(handle)) else {
      throw SQLiteError(
        code: SQLITE_RANGE,
        message: "\(arguments.count) arguments for \(sqlite3_bind_parameter_count(handle)) parameters")
    }
    for (i, argument) in arguments.enumerated() { try bind(argument.sqliteValue, at: Int32(i + 1)) }
  }

  func bind(_ value: SQLiteValue, at index: Int32) throws(SQLiteError) {
    let rc: Int32
    switch value {
    case .null: rc = sqlite3_bind_null(handle, index)
    case .integer(let v): rc = sqlite3_bind_int64(handle, index, v)
    case .real(let v): rc = sqlite3_bind_double(handle, index, v)
    case .text(let v): rc = sqlite3_bind_text(handle, index, v, -1, Self.transient)
    case .blob(let v):
      // An empty blob stays a blob (a NULL pointer would bind NULL).
      rc =
        v.isEmpty
        ? sqlite3_bind_zeroblob(handle, index, 0)
        : v.withUnsafeBytes { sqlite3_bind_blob(handle, index, $0.baseAddress, Int32($0.count), Self.transient) }
    }
    guard rc == SQLITE_OK else { throw connection.error(rc) }
  }

  /// SQLITE_TRANSIENT: SQLite copies the bound bytes.
  static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

  /// One step: true when a row is ready, false when the statement is done.
  func step() throws(SQLiteError) -> Bool {
    switch sqlite3_step(handle) {
    case SQLITE_ROW: return true
    case SQLITE_DONE: return false
    case let rc: throw connection.error(rc)
    }
  }
}

/// The current row of a statement, read by column position.
struct SQLiteRow {
  let statement: OpaquePointer

  var columnCount: Int32 { sqlite3_column_count(statement) }

  func isNull(_ column: Int32) -> Bool { sqlite3_column_type(statement, column) == SQLITE_NULL }

  func name(_ column: Int32) -> String { sqlite3_column_name(statement, column).map { String(cString: $0) } ?? "?" }

  func optionalInteger(_ column: Int32) -> Int64? {
    isNull(column) ? nil : sqlite3_column_int64(statement, column)
  }

  func optionalReal(_ column: Int32) -> Double? {
    isNull(column) ? nil : sqlite3_column_double(statement, column)
  }

  func integer(_ column: Int32) throws(SQLiteError) -> Int64 {
    guard let v = optionalInteger(column) else { throw .mismatch("column \(name(column)) is NULL") }
    return v
  }

  func int(_ column: Int32) throws(SQLiteError) -> Int { Int(truncatingIfNeeded: try integer(column)) }

  func optionalText(_ column: Int32) -> String? {
    guard !isNull(column), let p = sqlite3_column_text(statement, column) else { return nil }
    let n = Int(sqlite3_column_bytes(statement, column))
    return String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self)
  }

  func text(_ column: Int32) throws(SQLiteError) -> String {
    guard let v = optionalText(column) else { throw .mismatch("column \(name(column)) is NULL") }
    return v
  }

  /// A blob (text reads as its UTF-8 bytes, as SQLite converts it); nil for NULL.
  func optionalData(_ column: Int32) -> Data? {
    if isNull(column) { return nil }
    let p = sqlite3_column_blob(statement, column)
    let n = Int(sqlite3_column_bytes(statement, column))
    guard let p, n > 0 else { return Data() }
    return Data(bytes: p, count: n)
  }

  func data(_ column: Int32) throws(SQLiteError) -> Data {
    guard let v = optionalData(column) else { throw .mismatch("column \(name(column)) is NULL") }
    return v
  }

  /// A date as GRDB stored and read it: text (`SQLiteDate`), or a number of seconds since 1970.
  func date(_ column: Int32) throws(SQLiteError) -> Date {
    switch sqlite3_column_type(statement, column) {
    case SQLITE_INTEGER, SQLITE_FLOAT: return Date(timeIntervalSince1970: sqlite3_column_double(statement, column))
    case SQLITE_TEXT:
      guard let text = optionalText(column), let d = SQLiteDate.date(text) else {
        throw .mismatch("column \(name(column)) holds no date")
      }
      return d
    default: throw .mismatch("column \(name(column)) holds no date")
    }
  }
}

/// Dates as GRDB stored them: text "yyyy-MM-dd HH:mm:ss.SSS" in UTC, rounded to the nearest millisecond as its
/// DateFormatter did (checked against 5,000 dates GRDB encoded: Tests/Fixtures/LocalData/grdb-dates.txt). The
/// calendar is the proleptic Gregorian one; ICU switched to the Julian calendar before 15 October 1582, so dates
/// before then (never a registration's) read and write differently than GRDB did. Reading accepts what GRDB read: "yyyy-MM-dd", then
/// optionally " " or "T", "HH:mm", ":ss", "." and one or more digits (only the first three count), and a zone
/// ("Z", "+HH:MM", "-HH:MM").
enum SQLiteDate {
  static func text(_ date: Date) -> String {
    // Milliseconds since 1970, from the reference-date interval Date holds, rounded half up.
    let ms = ((date.timeIntervalSinceReferenceDate + 978_307_200) * 1000 + 0.5).rounded(.down)
    guard ms.isFinite, abs(ms) < 9.0e15 else { return "0000-01-01 00:00:00.000" }
    let total = Int64(ms)
    let (days, msOfDay) = total.floorDivided(by: 86_400_000)
    let (y, m, d) = civil(fromDays: days)
    var s = ""
    s.reserveCapacity(23)
    pad(&s, y, 4)
    s += "-"
    pad(&s, m, 2)
    s += "-"
    pad(&s, d, 2)
    s += " "
    pad(&s, msOfDay / 3_600_000, 2)
    s += ":"
    pad(&s, msOfDay / 60_000 % 60, 2)
    s += ":"
    pad(&s, msOfDay / 1000 % 60, 2)
    s += "."
    pad(&s, msOfDay % 1000, 3)
    return s
  }

  static func pad(_ s: inout String, _ v: Int64, _ width: Int) {
    let digits = String(v.magnitude)
    if v < 0 { s += "-" }
    if digits.count < width { s += String(repeating: "0", count: width - digits.count) }
    s += digits
  }

  static func date(_ text: String) -> Date? {
    var p = Parser(bytes: Array(text.utf8))
    guard let y = p.digits(4), p.take("-"), let mo = p.digits(2), p.take("-"), let d = p.digits(2) else { return nil }
    var (h, mi, s, ms, zone): (Int64, Int64, Int64, Int64, Int64) = (0, 0, 0, 0, 0)
    if !p.atEnd {
      guard p.take(" ") || p.take("T"), let hh = p.digits(2), p.take(":"), let mm = p.digits(2) else { return nil }
      (h, mi) = (hh, mm)
      if let z = p.zone() {
        zone = z
      } else if !p.atEnd {
        guard p.take(":"), let ss = p.digits(2) else { return nil }
        s = ss
        if let z = p.zone() {
          zone = z
        } else if !p.atEnd {
          guard p.take("."), let first = p.digits(1) else { return nil }
          ms = first * 100
          if let second = p.digits(1) {
            ms += second * 10
            if let third = p.digits(1) {
              ms += third
              while p.digits(1) != nil {}
            }
          }
          zone = p.zone() ?? 0
        }
      }
      guard p.atEnd else { return nil }
    }
    guard (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, s < 61 else { return nil }
    let days = days(fromCivil: y, mo, d)
    let seconds = days * 86_400 + h * 3600 + mi * 60 + s - zone
    return Date(timeIntervalSince1970: Double(seconds) + Double(ms) / 1000)
  }

  struct Parser {
    let bytes: [UInt8]
    var i = 0
    var atEnd: Bool { i == bytes.count }

    mutating func take(_ c: Unicode.Scalar) -> Bool {
      guard i < bytes.count, bytes[i] == UInt8(ascii: c) else { return false }
      i += 1
      return true
    }

    mutating func digits(_ n: Int) -> Int64? {
      guard bytes.count - i >= n else { return nil }
      var v: Int64 = 0
      for b in bytes[i..<i + n] {
        guard b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") else { return nil }
        v = v * 10 + Int64(b - UInt8(ascii: "0"))
      }
      i += n
      return v
    }

    /// "Z", "+HH:MM" or "-HH:MM": the offset east of UTC in seconds; nil (nothing consumed) when none is there.
    mutating func zone() -> Int64? {
      if take("Z") { return 0 }
      let start = i
      for (sign, c) in [(Int64(1), Unicode.Scalar("+")), (-1, "-")] where take(c) {
        if let h = digits(2), take(":"), let m = digits(2) { return sign * (h * 3600 + m * 60) }
        i = start
      }
      return nil
    }
  }

  /// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar (H. Hinnant's algorithm).
  static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
    let z = z0 + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let d = doy - (153 * mp + 2) / 5 + 1
    let m = mp < 10 ? mp + 3 : mp - 9
    return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
  }

  static func days(fromCivil y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
    let y = m <= 2 ? y0 - 1 : y0
    let era = (y >= 0 ? y : y - 399) / 400
    let yoe = y - era * 400
    let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    return era * 146_097 + doe - 719_468
  }
}

extension Int64 {
  /// Quotient rounded toward minus infinity and the matching non-negative remainder.
  fileprivate func floorDivided(by d: Int64) -> (Int64, Int64) {
    let (q, r) = quotientAndRemainder(dividingBy: d)
    return r < 0 ? (q - 1, r + d) : (q, r)
  }
}
