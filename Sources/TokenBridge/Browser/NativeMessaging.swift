import FoundationEssentials
import UAFCore

/// The browsers' native-messaging framing (Chrome "Native messaging", Firefox "Native manifests"/"Native messaging"):
/// each message on stdin and stdout is a 32-bit length in the machine's byte order followed by that many bytes of
/// UTF-8 JSON. A browser refuses a host message larger than 1 MiB; this host refuses input frames of more than 1 MiB
/// too (a UAF message the service takes is at most 1 MiB, docs/dbus-api.md).
public enum NativeMessaging {
  /// The largest message a host may send (Chromium and Firefox drop the connection above it).
  public static let maxHostToBrowser = 1 << 20
  /// The largest message this host reads.
  public static let maxBrowserToHost = 1 << 20

  public enum FrameError: Error, Equatable, Sendable {
    /// A frame announced `length` bytes, more than the bound.
    case oversized(length: UInt32)
    /// The input ended inside a frame (`have` of `want` bytes, the 4-byte header included).
    case truncated(have: Int, want: Int)
    /// A frame's bytes are not one JSON value in UTF-8.
    case notJSON
  }

  /// Splits a byte stream into frames; fed in pieces of any size, as `read(2)` returns them.
  public struct FrameReader: Sendable {
    var buffer: [UInt8] = []
    var start = 0
    public init() {}

    public mutating func append(_ bytes: some Collection<UInt8>) {
      if start > 0 && start == buffer.count {
        buffer.removeAll(keepingCapacity: true)
        start = 0
      }
      buffer.append(contentsOf: bytes)
    }

    /// The next whole frame's payload, nil when more input is needed; an announced length over the bound throws
    /// before its bytes are awaited.
    public mutating func next() throws(FrameError) -> [UInt8]? {
      guard buffer.count - start >= 4 else { return nil }
      let length = buffer[start..<start + 4].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
      guard length <= UInt32(maxBrowserToHost) else { throw .oversized(length: length) }
      let end = start + 4 + Int(length)
      guard buffer.count >= end else { return nil }
      defer {
        start = end
        if start > 64 * 1024 {
          buffer.removeFirst(start)
          start = 0
        }
      }
      return Array(buffer[start + 4..<end])
    }

    /// At the end of input: throws when a frame was begun and not finished.
    public func finish() throws(FrameError) {
      let left = buffer.count - start
      guard left > 0 else { return }
      let want =
        left >= 4
        ? 4 + Int(buffer[start..<start + 4].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }) : 4
      throw .truncated(have: left, want: want)
    }
  }

  /// `payload` framed for the browser; nil when it is larger than a browser takes.
  public static func frame(_ payload: [UInt8]) -> [UInt8]? {
    guard payload.count <= maxHostToBrowser else { return nil }
    return withUnsafeBytes(of: UInt32(payload.count)) { Array($0) } + payload
  }
}

/// One call from the extension (browser/extension/background.js) to the host. The origin is the one the browser
/// gave the extension for the calling document (its `MessageSender`), never anything the page wrote.
public struct BrowserRequest: Equatable, Sendable {
  /// The FIDO UAF DOM API's operations (UAF Application API and Transport Binding v1.1 §5), and `cancel`: the
  /// document that made the processUAFOperation `cancels` is gone (its tab closed or navigated away).
  public enum Method: String, Sendable, CaseIterable {
    case discover, checkPolicy, processUAFOperation, notifyUAFResult, cancel
  }
  /// The extension's number for the call; the reply carries it back.
  public var id: Int
  public var method: Method
  public var origin: String
  /// `UAFMessage.uafProtocolMessage` (checkPolicy, processUAFOperation, notifyUAFResult).
  public var uafProtocolMessage: String
  /// notifyUAFResult's `responseCode` (the server's UAF status code).
  public var responseCode: UInt32
  /// cancel's call: the id of the processUAFOperation to end.
  public var cancels = 0

  public init(id: Int, method: Method, origin: String, uafProtocolMessage: String = "", responseCode: UInt32 = 0) {
    self.id = id
    self.method = method
    self.origin = origin
    self.uafProtocolMessage = uafProtocolMessage
    self.responseCode = responseCode
  }

  /// The UAFMessage as the service reads it (`UAFEnvelope`, the one writer of the envelope).
  public var envelope: String { UAFEnvelope.write(uafProtocolMessage, pretty: false) }

  /// Why a frame is not a request. `id` is set when the frame names one (the host then answers that call).
  public struct Invalid: Error, Equatable, Sendable {
    public var id: Int?
    public var code: UAFErrorCode
    public var reason: String
  }

  /// Ids are JSON numbers that a JavaScript number holds exactly.
  public static let maxID = (1 << 53) - 1

  /// Reads one frame's payload. A payload that is not a JSON object with a usable `id` throws `Invalid` with `id`
  /// nil: the connection is then ended, as for a broken frame.
  public static func parse(_ payload: [UInt8]) throws(Invalid) -> BrowserRequest {
    guard let object = JSONValue.parseObject(payload) else {
      throw Invalid(id: nil, code: .protocolError, reason: "a frame that is not a JSON object")
    }
    guard case .number(let n)? = object["id"], n >= 0, n <= Double(maxID), n == n.rounded(.towardZero) else {
      throw Invalid(id: nil, code: .protocolError, reason: "a message without an id")
    }
    let id = Int(n)
    func invalid(_ code: UAFErrorCode, _ reason: String) -> Invalid { Invalid(id: id, code: code, reason: reason) }
    guard case .string(let m)? = object["method"], let method = Method(rawValue: m) else {
      throw invalid(.protocolError, "an unknown method")
    }
    if method == .cancel {
      guard case .number(let c)? = object["cancels"], c >= 0, c <= Double(maxID), c == c.rounded(.towardZero) else {
        throw invalid(.protocolError, "cancel names no call")
      }
      var request = BrowserRequest(id: id, method: method, origin: "")
      request.cancels = Int(c)
      return request
    }
    guard case .string(let origin)? = object["origin"], origin.utf8.count <= 2048 else {
      throw invalid(.untrustedFacetID, "no origin")
    }
    guard origin.hasPrefix("https://") else { throw invalid(.insecureTransport, "not an https origin") }
    guard ServiceSupport.isOrigin(origin) else { throw invalid(.untrustedFacetID, "not an origin") }
    var request = BrowserRequest(id: id, method: method, origin: origin)
    if method != .discover {
      guard case .string(let message)? = object["uafProtocolMessage"] else {
        throw invalid(.protocolError, "no uafProtocolMessage")
      }
      request.uafProtocolMessage = message
    }
    if method == .notifyUAFResult {
      guard case .number(let code)? = object["responseCode"], code >= 0, code <= Double(UInt32.max),
        code == code.rounded(.towardZero)
      else { throw invalid(.protocolError, "no responseCode") }
      request.responseCode = UInt32(code)
    }
    return request
  }
}

/// The host's answers: `{"id", "errorCode"}` and, on success, `uafProtocolMessage` (processUAFOperation) or
/// `discoveryData` (discover), as the DOM API's callbacks take them.
public enum BrowserReply {
  /// A JSON value built by the host (the discovery data it read from the service).
  public indirect enum Value: Equatable, Sendable {
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([Value])
    case object([String: Value])

    var json: JSONValue {
      switch self {
      case .bool(let b): .bool(b)
      case .number(let n): .number(n)
      case .string(let s): .string(s)
      case .array(let a): .array(a.map(\.json))
      case .object(let o): .object(o.mapValues(\.json))
      }
    }
  }

  /// The framed reply; one larger than a browser takes becomes UNKNOWN (255) for the same id.
  public static func framed(id: Int, errorCode: UAFErrorCode, fields: [String: Value] = [:]) -> [UInt8] {
    var object = fields.mapValues(\.json)
    object["id"] = .number(Double(id))
    object["errorCode"] = .number(Double(errorCode.rawValue))
    if let f = NativeMessaging.frame(JSONValue.object(object).serialized) { return f }
    let small: JSONValue = .object(["id": .number(Double(id)), "errorCode": .number(255)])
    return NativeMessaging.frame(small.serialized)!
  }
}

/// Which extension started the host, from the arguments the browser passes (Chromium: `chrome-extension://ID/`;
/// Firefox: the host manifest's path, then the add-on id). Only the extension of this project is accepted: the
/// ids its host manifests allow (browser/extension/manifest.json's `key` and gecko id).
public enum BrowserCaller: String, Sendable {
  case chromium, firefox

  /// Derived from the public key in browser/extension/manifest.json (Chromium: the first 16 bytes of the key's
  /// SHA-256, each nibble written as a letter a-p).
  public static let chromiumExtensionID = "hfnmlfnggfigafmgljnljmddoofhjjgn"
  /// `browser_specific_settings.gecko.id` of browser/extension/manifest.json.
  public static let geckoExtensionID = "uaf@tokenbridge.org"
  /// The native-messaging host's name, in its manifests and the extension's `connectNative`.
  public static let hostName = "org.tokenbridge.uaf"

  public static func identify(_ arguments: [String]) -> BrowserCaller? {
    if arguments.first == "chrome-extension://\(chromiumExtensionID)/" { return .chromium }
    if arguments.count >= 2, arguments[1] == geckoExtensionID, arguments[0].hasSuffix("/\(hostName).json") {
      return .firefox
    }
    return nil
  }
}
