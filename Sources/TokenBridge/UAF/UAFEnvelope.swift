import FoundationEssentials
import UAFCore

/// The Client API's `UAFMessage` envelope (UAF Application API and Transport Binding v1.1 §3.1.1):
/// `{"uafProtocolMessage": "<the protocol message as a string>"}`. Read and written here only, for every front end
/// (`uaf process`, the D-Bus service, the browser host).
public enum UAFEnvelope {
  /// The protocol message in `input`: the envelope's `uafProtocolMessage`, or `input` itself when it is the bare
  /// request array. An object that is not the envelope is malformed; over `UAFMessageCodec.maxSize`, too large.
  public static func read(_ input: [UInt8]) throws(UAFMessageError) -> String {
    guard input.count <= UAFMessageCodec.maxSize else { throw .tooLarge(input.count) }
    if let envelope = try? JSONDecoder().decode([String: String].self, from: Data(input)) {
      guard let m = envelope["uafProtocolMessage"] else { throw .malformed("no uafProtocolMessage") }
      return m
    }
    if input.first(where: { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }) == UInt8(ascii: "{") {
      throw .malformed("the envelope must be {\"uafProtocolMessage\": \"<request array>\"}")
    }
    return String(decoding: input, as: UTF8.self)
  }

  /// The protocol message of `input` when it is an envelope or a bare message, nil when it is neither.
  public static func message(_ input: String) -> String? { try? read(Array(input.utf8)) }

  /// The envelope around `message` (a deregistration's response: the empty string), pretty-printed as
  /// `uaf process` prints it, or on one line (`pretty: false`) as the browser host passes a page's message on.
  public static func write(_ message: String, pretty: Bool = true) -> String {
    let enc = JSONEncoder()
    enc.outputFormatting =
      pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
    let out = (try? enc.encode(["uafProtocolMessage": message])) ?? Data()
    return String(decoding: out, as: UTF8.self)
  }
}

extension UAFEnvironment {
  /// The request checks every front end applies before it lists a token or shows a dialog: the envelope, then
  /// every rule of UAF Protocol v1.1 on the request (`UAFMessageCodec.decodeRequest`). The facet check follows
  /// in `processUAF`/`checkPolicy` (it may fetch the trusted facets).
  public static func validateRequest(_ input: [UInt8]) throws(OperationError) {
    do { _ = try UAFMessageCodec.decodeRequest(UAFEnvelope.read(input), expecting: nil) } catch {
      throw .message(error)
    }
  }
}
