import Platform

/// Why `tokenbridge provision` (or one of its rows) stopped. Refusals come before any token is touched.
public enum ProvisionError: Error, Equatable, Sendable {
  /// The plan file cannot be used.
  case plan(ProvisionPlanError)
  /// The journal cannot be opened, read or written.
  case journal(LocalDataError)
  /// The journal was made for another plan: a rerun must name the same plan.
  case otherPlan
  /// The journal was made for another server.
  case otherServer(journal: String, now: String)
  /// Tokens still at their factory PIN (or without a PIN) and no `--pin-recipient` to seal a fresh one to.
  case recipientNeeded(tokens: [String])
  /// Tokens with a PIN of their own and no `--pin-fd` to give it.
  case currentPINNeeded(tokens: [String])
  /// `age` did not take the recipient (its first line of complaint).
  case badRecipient(String)
  /// The `age` program is not installed.
  case ageMissing
  /// `age` failed to seal a PIN (its exit status); nothing was set on the token.
  case sealFailed(status: Int32)
  /// The row's token got a fresh PIN in a killed run and the PIN is no longer held (the keyring entry expired):
  /// only the sealed PIN in the report can open it.
  case pinLost(token: String)
  /// `--parallel` outside 1...maximum.
  case parallel(Int, maximum: Int)
}

extension ErrorReport {
  static func provision(_ e: ProvisionError) -> ErrorReport {
    switch e {
    case .plan(let p): return planReport(p)
    case .journal(let l): return localData(l)
    case .otherPlan:
      return .init(
        status: .usage,
        message: "The journal was made for another plan; a rerun needs the same plan (or a new --journal).")
    case .otherServer(let j, let now):
      return .init(
        status: .usage,
        message:
          "The journal was made for the server \(shown(j)), not \(shown(now)); use that server or a new --journal.")
    case .recipientNeeded(let tokens):
      return .init(
        status: .usage,
        message: "\(tokens.joined(separator: ", ")) still \(tokens.count == 1 ? "has" : "have") the factory PIN (or "
          + "none); --pin-recipient AGE_RECIPIENT is needed to seal the fresh PIN each gets. No token was changed.")
    case .currentPINNeeded(let tokens):
      return .init(
        status: .usage,
        message: "\(tokens.joined(separator: ", ")) already \(tokens.count == 1 ? "has" : "have") a PIN; give it with "
          + "--pin-fd N. No token was changed.")
    case .badRecipient(let why):
      return .init(status: .usage, message: "age does not take the --pin-recipient: \(shown(why))")
    case .ageMissing:
      return .init(
        status: .configuration,
        message: "The age program is not installed (Debian: apt install age); it seals the PINs provision sets.")
    case .sealFailed(let status):
      return .init(
        status: .failure, message: "age could not seal the PIN (exit \(status)); the token was not changed.")
    case .pinLost(let token):
      return .init(
        status: .failure,
        message: "\(token) got a fresh PIN in an interrupted run and that PIN is no longer held here; the sealed PIN "
          + "in the report opens it.")
    case .parallel(let n, let max):
      return .init(status: .usage, message: "--parallel must be 1 to \(max), not \(n).")
    }
  }

  static func planReport(_ p: ProvisionPlanError) -> ErrorReport {
    let m: String
    switch p {
    case .empty:
      m = "The plan is empty: it needs a header line naming its columns (username, and serial, kind, payload)."
    case .notText: m = "The plan is not UTF-8 text (a CSV file is)."
    case .tooLarge(let limit): m = "The plan is larger than \(limit) bytes."
    case .missingUsernameColumn: m = "The plan's header has no username column."
    case .unknownColumn(let c): m = "The plan's header names \"\(c)\"; the columns are username, serial, kind, payload."
    case .duplicateColumn(let c): m = "The plan's header names \(c) twice."
    case .unterminatedQuote(let l): m = "Plan line \(l): a quoted field is not closed."
    case .strayQuote(let l):
      m = "Plan line \(l): a double quote inside an unquoted field (quote the field, double the quote)."
    case .fieldCount(let l, let e, let g): m = "Plan line \(l) has \(g) fields; the header has \(e)."
    case .emptyUsername(let l): m = "Plan line \(l) has no username."
    case .tooLong(let l, let c, let limit): m = "Plan line \(l): \(c) is longer than \(limit) characters."
    case .controlCharacter(let l, let c): m = "Plan line \(l): \(c) holds a control character."
    case .badKind(let l, let v): m = "Plan line \(l): kind is \"\(v)\"; it is piv or fido2 (or empty)."
    case .duplicateSerial(let l, let s): m = "Plan line \(l): serial \(s) is named by an earlier row too."
    case .noRows: m = "The plan has a header and no rows."
    case .tooManyRows(let limit): m = "The plan has more than \(limit) rows."
    }
    return .init(status: .usage, message: m)
  }
}
