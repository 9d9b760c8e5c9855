import UAFCore

/// The protocol and the server: UAF messages refused, and what the backend answered.
extension ErrorReport {
  static func message(_ m: UAFMessageError) -> ErrorReport {
    switch m {
    case .malformed(let d): return .init(status: .badMessage, message: "The UAF message is malformed: \(shown(d)).")
    case .unsupportedVersion(let v):
      return .init(
        status: .badMessage,
        message: "No request in a UAF version this client speaks (1.0, 1.1); got "
          + v.map { "\($0.major).\($0.minor)" }.joined(separator: ", ") + ".")
    case .tooLarge(let n): return .init(status: .badMessage, message: "The UAF message is too large (\(n) bytes).")
    case .unexpectedOperation(let expected, let got):
      return .init(
        status: .badMessage,
        message: "The server answered a \(name(expected)) request with a \(name(got)) message; it was refused and "
          + "nothing was processed. Check the server URL.")
    case .mixedOperations(let ops):
      return .init(
        status: .badMessage,
        message: "The UAF message mixes operations (\(ops.map(\.rawValue).joined(separator: ", "))); nothing was "
          + "processed.")
    case .duplicateVersion(let v):
      return .init(
        status: .badMessage,
        message: "The UAF message holds two requests for UAF \(v.major).\(v.minor); nothing was processed.")
    case .invalidField(let i, let field, let rule):
      return .init(
        status: .badMessage,
        message: "The UAF request (entry \(i)) is refused: \(field) \(fieldRule(rule)); nothing was signed.")
    case .unknownExtension(let i, let id):
      return .init(
        status: .badMessage,
        message: "The UAF request (entry \(i)) needs the extension \(shown(id)), which this client does not know "
          + "(fail_if_unknown); nothing was signed.")
    }
  }

  /// What a UAF field must be, as a phrase.
  static func fieldRule(_ rule: UAFFieldRule) -> String {
    switch rule {
    case .base64URL(let min, let max?): "must be base64url of \(min) to \(max) bytes"
    case .base64URL(let min, nil): "must be base64url of at least \(min) byte\(min == 1 ? "" : "s")"
    case .length(let min, let max): "must be \(min) to \(max) characters long"
    case .aaid: "must be an AAID (4 hex digits, #, 4 hex digits)"
    case .vendorID: "must be 4 hex digits"
    case .range(let min, let max): "must be a number from \(min) to \(max)"
    case .keyIDWithoutAAID: "must be empty when aaid is empty"
    case .wildcardNeedsUAF11: "needs both aaid and keyID in UAF 1.0"
    case .wildcardNotAlone: "may be empty (every key of the appID) only as the one entry of the list"
    case .notEmpty: "must not be empty"
    case .aaidCombinedWith(let f): "names aaid, which must not be combined with \(f)"
    case .algorithmsAndSchemesRequired: "names no aaid, so it must give authenticationAlgorithms and assertionSchemes"
    case .contentType: "must be text/plain or image/png"
    case .textLength(let max): "must be text (UTF-8) of at most \(max) characters"
    case .pngCharacteristicsRequired: "must be present for image/png content"
    }
  }

  static func backend(_ b: BackendError) -> ErrorReport {
    switch b {
    case .uafStatus(1481, _):
      return .init(
        status: .unknownKey, message: "The server does not know this key any more (1481): \(UAFStatus.meaning(1481)).",
        code: "UAF 1481")
    case .uafStatus(let code, let d):
      return .init(
        status: .serverRefused,
        message: "The server refused: \(code) \(UAFStatus.meaning(code))\(d.map { " (\(shown($0)))" } ?? "").",
        code: "UAF \(code)")
    case .http(let code):
      return .init(status: .serverUnreachable, message: "The server answered HTTP \(code).", code: "HTTP \(code)")
    case .timedOut(let url):
      return .init(status: .serverUnreachable, message: "The server did not answer in time (\(shown(url))).")
    case .unreachable(let why):
      return .init(status: .serverUnreachable, message: "The server cannot be reached: \(shown(why))")
    case .malformedAnswer(let why):
      return .init(
        status: .serverUnreachable, message: "The server's answer is not what the protocol says: \(shown(why)).")
    case .answerTooLarge(let limit):
      return .init(
        status: .serverUnreachable,
        message: "The server's answer is longer than \(limit) bytes; nothing of it was used.")
    case .insecureURL(let url):
      return .init(
        status: .serverUnreachable,
        message: "Not contacted: \(shown(url)) is plain http, allowed only on this machine's loopback.")
    case .httpLibraryMissing(let why):
      return .init(
        status: .serverUnreachable,
        message: "Not contacted: \(shown(why)); HTTP needs libcurl 7.85 or newer (Debian: apt install libcurl4).")
    }
  }
}
