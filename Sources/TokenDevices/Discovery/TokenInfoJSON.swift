import FoundationEssentials

extension TokenInfo: JSONWritable {
  /// `tokens --json`: the JSON `JSONEncoder` ([.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]) writes for
  /// `tokens`, byte for byte, written field by field. Why not `Encodable` (issue 12, scale): the synthesized
  /// `encode(to:)` goes through the standard library's generic keyed containers, whose metadata a short process
  /// instantiates on first use, for every field type; with 8 cards and 4 keys that was 1.5M of the command's 4.6M
  /// instructions (callgrind). Debug builds also encode with `JSONEncoder` and stop at any difference;
  /// `TokenInfoJSONTests` compares both for values with every field set (a field added to these types and not here
  /// fails it).
  public static func json(_ tokens: [TokenInfo]) -> String {
    var w = JSONText.Writer()
    w.array { w in for t in tokens { t.write(&w) } }
    let text = w.text
    #if DEBUG
      let enc = JSONEncoder()
      enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
      let reference = (try? enc.encode(tokens)).map { String(decoding: $0, as: UTF8.self) }
      if text != reference { fatalError("TokenInfo.json and JSONEncoder differ:\n\(text)\n---\n\(reference ?? "")") }
    #endif
    return text
  }

  /// The fields in sorted key order (UTF-8 bytes), nil ones left out (as `encodeIfPresent` leaves them).
  public func write(_ w: inout JSONText.Writer) {
    w.object { w in
      w.field("capabilities", capabilities)
      w.field("fido2", fido2)
      w.field("fido2PIN", fido2PIN)
      w.field("id", id)
      w.field("ids", ids)
      w.field("kind", kind.rawValue)
      w.field("kinds", kinds?.map(\.rawValue))
      w.field("name", name)
      w.field("pin", pin)
      w.field("puk", puk)
      w.field("reader", reader)
      w.field("sameDeviceAs", sameDeviceAs)
      w.field("serial", serial)
      w.field("usbDevice", usbDevice)
      w.field("version", version)
    }
  }
}

extension PINStatus: JSONWritable {
  public func write(_ w: inout JSONText.Writer) {
    w.object { w in
      w.field("isDefault", isDefault)
      w.field("isVerified", isVerified)
      w.field("kind", kind.rawValue)
      w.field("maxRetries", maxRetries)
      w.field("powerCycleRequired", powerCycleRequired)
      w.field("retriesLeft", retriesLeft)
    }
  }
}

extension FIDO2Info: JSONWritable {
  public func write(_ w: inout JSONText.Writer) {
    w.object { w in
      w.field("aaguid", aaguid)
      w.field("extensions", extensions)
      w.field("firmwareVersion", firmwareVersion)
      w.field("forcePINChange", forcePINChange)
      w.field("maxMsgSize", maxMsgSize)
      w.field("minPINLength", minPINLength)
      w.key("options")
      w.object { w in
        for name in JSONText.sortedKeys(options.keys) {
          w.field(name, options[name])
        }
      }
      w.key("pinProtocols")
      w.array { w in for p in pinProtocols { w.integer(p) } }
      w.field("remainingDiscoverableCredentials", remainingDiscoverableCredentials)
      w.field("uvRetries", uvRetries)
      w.field("versions", versions)
    }
  }
}
