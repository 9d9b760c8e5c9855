import FoundationEssentials

/// Reads and writes UAF protocol messages (a JSON array of requests or responses).
public enum UAFMessageCodec {
  /// Messages over 1 MiB are refused before parsing (a real one is a few KB).
  public static let maxSize = 1 << 20

  /// Decodes a server's UAF request message and returns the one request to process, checked before anything
  /// is processed (UAF Protocol v1.1 §3.1):
  /// - the message is a non-empty JSON array, one request per protocol version: no two with the same `upv`
  ///   (`.duplicateVersion`), all with the same `op` (`.mixedOperations`);
  /// - `op` is `expecting` when given (`.unexpectedOperation`): a server asked for a registration or an
  ///   authentication cannot slip in a deregistration;
  /// - the request with the highest `upv` this client speaks is picked (`.unsupportedVersion` when none);
  /// - its fields keep the spec's bounds (`.invalidField`, see `UAFBounds`): challenge, username, appID,
  ///   serverData, KeyIDs, AAIDs, extensions, transaction content, policy criteria.
  /// Requests in versions we do not speak are only read as far as their header.
  public static func decodeRequest(_ json: String, expecting: UAFOperation?) throws(UAFMessageError) -> UAFRequest {
    try decodeRequest(bytes: Array(json.utf8), expecting: expecting)
  }

  /// `decodeRequest(_:expecting:)` over raw bytes (UTF-8 JSON): the entry point for fuzzing.
  public static func decodeRequest(bytes: [UInt8], expecting: UAFOperation?) throws(UAFMessageError) -> UAFRequest {
    guard bytes.count <= maxSize else { throw .tooLarge(bytes.count) }
    let data = Data(bytes)
    let headers = try decodeHeaders(data)
    guard !headers.isEmpty else { throw .malformed("the message holds no request") }

    for (i, h) in headers.enumerated() { try RequestValidator(index: i).version(h.upv, "header.upv") }
    let ops = headers.map(\.op)
    guard ops.allSatisfy({ $0 == ops[0] }) else { throw .mixedOperations(ops) }
    for (i, h) in headers.enumerated() where headers[..<i].contains(where: { $0.upv == h.upv }) {
      throw .duplicateVersion(h.upv)
    }
    if let expecting, ops[0] != expecting { throw .unexpectedOperation(expected: expecting, got: ops[0]) }

    let supported = headers.indices.filter { Version.supported.contains(headers[$0].upv) }
    guard let chosen = supported.max(by: { headers[$0].upv < headers[$1].upv }) else {
      throw .unsupportedVersion(headers.map(\.upv))
    }
    let request = try decodeElement(data, index: chosen, op: ops[0])
    try RequestValidator(index: chosen).request(request)
    return request
  }

  /// The request to process, as a one-element array: kept for callers of the old API, which took the first
  /// element. Prefer `decodeRequest(_:expecting:)`, which also checks the operation.
  public static func decodeRequests(_ json: String) throws(UAFMessageError) -> [UAFRequest] {
    [try decodeRequest(json, expecting: nil)]
  }

  public static func encodeResponses(_ responses: [UAFResponse]) -> String {
    let enc = JSONEncoder()
    enc.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: (try? enc.encode(responses)) ?? Data("[]".utf8), as: UTF8.self)
  }

  // MARK: - Decoding in two passes: every header, then the one request picked.

  struct Header: Decodable {
    var upv: Version
    var op: UAFOperation
  }

  /// Reads `[{header: {upv, op}}, ...]`, stopping at the first element that is not a request.
  struct HeaderList: Decodable {
    var headers: [Header] = []

    struct Element: Decodable { var header: Header }

    init(from decoder: Decoder) throws {
      var c: UnkeyedDecodingContainer
      do { c = try decoder.unkeyedContainer() } catch {
        throw UAFMessageError.malformed("a UAF message is a JSON array of requests")
      }
      while !c.isAtEnd {
        let i = headers.count
        do { headers.append(try c.decode(Element.self).header) } catch DecodingError.dataCorrupted(let ctx)
          where ctx.codingPath.last?.stringValue == "op"
        {
          throw UAFMessageError.malformed("request \(i): header.op is not Reg, Auth or Dereg")
        } catch {
          throw UAFMessageError.malformed("request \(i): \(UAFMessageCodec.describe(error, in: i))")
        }
      }
    }
  }

  static let pick = CodingUserInfoKey(rawValue: "UAFMessageCodec.pick")!

  /// Skips elements before the picked one and decodes that one as its operation's request.
  struct Picked: Decodable {
    var request: UAFRequest?

    struct Skip: Decodable { init(from decoder: Decoder) throws {} }

    init(from decoder: Decoder) throws {
      guard let (index, op) = decoder.userInfo[UAFMessageCodec.pick] as? (Int, UAFOperation) else { return }
      var c = try decoder.unkeyedContainer()
      for _ in 0..<index { _ = try c.decode(Skip.self) }
      switch op {
      case .reg: request = .registration(try c.decode(RegistrationRequest.self))
      case .auth: request = .authentication(try c.decode(AuthenticationRequest.self))
      case .dereg: request = .deregistration(try c.decode(DeregistrationRequest.self))
      }
    }
  }

  static func decodeHeaders(_ data: Data) throws(UAFMessageError) -> [Header] {
    do { return try JSONDecoder().decode(HeaderList.self, from: data).headers } catch let e as UAFMessageError {
      throw e
    } catch {
      throw .malformed("not JSON")
    }
  }

  static func decodeElement(_ data: Data, index: Int, op: UAFOperation) throws(UAFMessageError) -> UAFRequest {
    let dec = JSONDecoder()
    dec.userInfo[pick] = (index, op)
    do {
      guard let r = try dec.decode(Picked.self, from: data).request else {
        throw UAFMessageError.malformed("request \(index)")
      }
      return r
    } catch let e as UAFMessageError {
      throw e
    } catch {
      throw .malformed("request \(index) (\(op.rawValue)): \(describe(error, in: index))")
    }
  }

  /// Where decoding failed, in this client's field names (the path inside request `index`).
  static func describe(_ error: Error, in index: Int) -> String {
    func path(_ c: [CodingKey]) -> String {
      var out = ""
      for key in c.dropFirst() {  // the first key is the request's index in the array
        if let i = key.intValue { out += "[\(i)]" } else { out += (out.isEmpty ? "" : ".") + key.stringValue }
      }
      return out.isEmpty ? "the request" : out
    }
    return switch error {
    case DecodingError.keyNotFound(let key, let c):
      "missing \(c.codingPath.count > 1 ? path(c.codingPath) + "." : "")\(key.stringValue)"
    case DecodingError.typeMismatch(_, let c): "wrong type at \(path(c.codingPath))"
    case DecodingError.valueNotFound(_, let c): "missing value at \(path(c.codingPath))"
    case DecodingError.dataCorrupted(let c): "bad value at \(path(c.codingPath))"
    default: "not the shape UAF defines"
    }
  }
}
