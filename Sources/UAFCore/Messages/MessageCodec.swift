import Foundation

/// Why a UAF message was refused.
public enum UAFMessageError: Error, Equatable, Sendable {
  /// Not JSON, or not the shape UAF defines; `detail` says where.
  case malformed(String)
  /// No request in the message has a protocol version we speak.
  case unsupportedVersion([Version])
  /// Over the size limit.
  case tooLarge(Int)
}

/// Reads and writes UAF protocol messages (a JSON array of requests or responses).
public enum UAFMessageCodec {
  /// Messages over 1 MiB are refused before parsing (a real one is a few KB).
  public static let maxSize = 1 << 20

  /// Decodes a request array, keeping the requests whose `upv` we support (UAF Protocol §3.1: the client picks
  /// the version it understands). Throws `.unsupportedVersion` when none is left.
  public static func decodeRequests(_ json: String) throws(UAFMessageError) -> [UAFRequest] {
    let data = Data(json.utf8)
    guard data.count <= maxSize else { throw .tooLarge(data.count) }
    let raw: [Any]
    do {
      guard let a = try JSONSerialization.jsonObject(with: data) as? [Any] else {
        throw UAFMessageError.malformed("a UAF message is a JSON array of requests")
      }
      raw = a
    } catch let e as UAFMessageError {
      throw e
    } catch {
      throw .malformed("not JSON")
    }
    guard !raw.isEmpty else { throw .malformed("the message holds no request") }
    var out: [UAFRequest] = []
    var seen: [Version] = []
    for (i, element) in raw.enumerated() {
      guard let obj = element as? [String: Any], let header = obj["header"] as? [String: Any],
        let opString = header["op"] as? String
      else { throw .malformed("request \(i) has no header.op") }
      guard let op = UAFOperation(rawValue: opString) else { throw .malformed("request \(i): unknown op \(opString)") }
      guard let elementData = try? JSONSerialization.data(withJSONObject: element) else {
        throw .malformed("request \(i)")
      }
      let dec = JSONDecoder()
      do {
        let request: UAFRequest
        switch op {
        case .reg: request = .registration(try dec.decode(RegistrationRequest.self, from: elementData))
        case .auth: request = .authentication(try dec.decode(AuthenticationRequest.self, from: elementData))
        case .dereg: request = .deregistration(try dec.decode(DeregistrationRequest.self, from: elementData))
        }
        seen.append(request.header.upv)
        if Version.supported.contains(request.header.upv) { out.append(request) }
      } catch {
        throw .malformed("request \(i) (\(op.rawValue)): \(describe(error))")
      }
    }
    guard !out.isEmpty else { throw .unsupportedVersion(seen) }
    return out
  }

  public static func encodeResponses(_ responses: [UAFResponse]) -> String {
    let enc = JSONEncoder()
    enc.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: (try? enc.encode(responses)) ?? Data("[]".utf8), as: UTF8.self)
  }

  static func describe(_ error: Error) -> String {
    switch error {
    case DecodingError.keyNotFound(let key, _): "missing \(key.stringValue)"
    case DecodingError.typeMismatch(_, let c): "wrong type at \(c.codingPath.map(\.stringValue).joined(separator: "."))"
    case DecodingError.valueNotFound(_, let c):
      "missing value at \(c.codingPath.map(\.stringValue).joined(separator: "."))"
    case DecodingError.dataCorrupted(let c): "bad value at \(c.codingPath.map(\.stringValue).joined(separator: "."))"
    default: "\(error)"
    }
  }
}
