/// Why a UAF message was refused. Facts only: field paths are this client's names (never server text), so
/// the CLI can render any case as it is.
public enum UAFMessageError: Error, Equatable, Sendable {
  /// Not JSON, or not the shape UAF defines; `detail` says where (no server text in it).
  case malformed(String)
  /// No request in the message has a protocol version we speak.
  case unsupportedVersion([Version])
  /// Over the size limit.
  case tooLarge(Int)
  /// The server answered with another operation than the one asked for (e.g. a `Dereg` message to a
  /// registration request). Nothing was processed.
  case unexpectedOperation(expected: UAFOperation, got: UAFOperation)
  /// The message's requests do not all have the same `op` (UAF Protocol §3.1); the ops in message order.
  case mixedOperations([UAFOperation])
  /// Two requests of the message have the same `upv` (UAF Protocol §3.1).
  case duplicateVersion(Version)
  /// A field breaks a bound of the UAF spec. `request` is the index in the message's array; `field` the path
  /// inside it (e.g. `challenge`, `header.serverData`, `authenticators[1].keyID`,
  /// `policy.accepted[0][0].aaid[2]`).
  case invalidField(request: Int, field: String, rule: UAFFieldRule)
  /// `header.exts` holds an extension this client does not know with `fail_if_unknown` true: "unknown extensions
  /// MUST result in an error" (UAF Protocol v1.1 §3.1.10). The client passes extensions to its authenticators, and
  /// ours know none: the authenticator's error is UAF_ASM_STATUS_ERROR, the Client API's UNKNOWN (§3.4.6.2.1).
  case unknownExtension(request: Int, id: String)
}

/// The bound a field broke (UAF Protocol v1.1 §3.1, §3.4.1, §3.5.1, §3.6.1).
public enum UAFFieldRule: Equatable, Sendable {
  /// Must be base64url (RFC 4648 §5) of `min`...`max` bytes (`max` nil: no upper bound).
  case base64URL(minBytes: Int, maxBytes: Int?)
  /// Must be `min`...`max` characters long (UTF-16 code units, as WebIDL's DOMString counts them).
  case length(min: Int, max: Int)
  /// Must be an AAID: 4 hex digits, `#`, 4 hex digits (UAF Protocol §3.1.4).
  case aaid
  /// Must be a vendor ID: 4 hex digits (the first part of an AAID).
  case vendorID
  /// Must be an integer in `min`...`max`.
  case range(min: Int, max: Int)
  /// UAF 1.1 §3.6.1: when `aaid` is empty (deregister everything), `keyID` must be empty too.
  case keyIDWithoutAAID
  /// UAF 1.0 §3.6.1 knows no wildcard: `aaid` and `keyID` must both be present.
  case wildcardNeedsUAF11
  /// UAF 1.1 §3.6.4.2 step 4: empty `aaid` and `keyID` only in the first and only DeregisterAuthenticator.
  case wildcardNotAlone
  /// A list that must hold at least one entry (UAF Protocol v1.1 §3.1.12 `accepted` "MUST NOT be empty"; §3
  /// notation: lists are non-empty unless stated otherwise).
  case notEmpty
  /// UAF 1.1 §3.1.11: `aaid` "MUST NOT be combined with any other match criteria field" than keyIDs,
  /// attachmentHint, authenticatorVersion and exts; the field it was combined with.
  case aaidCombinedWith(String)
  /// UAF 1.1 §3.1.11: without `aaid`, both `authenticationAlgorithms` and `assertionSchemes` "MUST be provided".
  case algorithmsAndSchemesRequired
  /// UAF 1.1 §3.5.1: `contentType` is `text/plain` or `image/png`, the only values this version supports.
  case contentType
  /// UAF 1.1 §3.5.1: text/plain content is at most `max` characters.
  case textLength(max: Int)
  /// UAF 1.1 §3.5.1: `tcDisplayPNGCharacteristics` "MUST be present if the contentType is image/png".
  case pngCharacteristicsRequired
}
