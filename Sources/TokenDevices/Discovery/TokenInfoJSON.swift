import FoundationEssentials

extension TokenInfo {
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
  func write(_ w: inout JSONText.Writer) {
    w.object { w in
      w.key("capabilities")
      w.strings(capabilities)
      if let fido2 {
        w.key("fido2")
        fido2.write(&w)
      }
      if let fido2PIN {
        w.key("fido2PIN")
        fido2PIN.write(&w)
      }
      w.key("id")
      w.string(id)
      if let ids {
        w.key("ids")
        w.strings(ids)
      }
      w.key("kind")
      w.string(kind.rawValue)
      if let kinds {
        w.key("kinds")
        w.strings(kinds.map(\.rawValue))
      }
      w.key("name")
      w.string(name)
      if let pin {
        w.key("pin")
        pin.write(&w)
      }
      if let puk {
        w.key("puk")
        puk.write(&w)
      }
      if let reader {
        w.key("reader")
        w.string(reader)
      }
      if let sameDeviceAs {
        w.key("sameDeviceAs")
        w.strings(sameDeviceAs)
      }
      if let serial {
        w.key("serial")
        w.integer(serial)
      }
      if let usbDevice {
        w.key("usbDevice")
        w.string(usbDevice)
      }
      if let version {
        w.key("version")
        w.string(version)
      }
    }
  }
}

extension PINStatus {
  func write(_ w: inout JSONText.Writer) {
    w.object { w in
      if let isDefault {
        w.key("isDefault")
        w.bool(isDefault)
      }
      w.key("isVerified")
      w.bool(isVerified)
      w.key("kind")
      w.string(kind.rawValue)
      if let maxRetries {
        w.key("maxRetries")
        w.integer(maxRetries)
      }
      if let retriesLeft {
        w.key("retriesLeft")
        w.integer(retriesLeft)
      }
    }
  }
}

extension FIDO2Info {
  func write(_ w: inout JSONText.Writer) {
    w.object { w in
      w.key("aaguid")
      w.string(aaguid)
      w.key("extensions")
      w.strings(extensions)
      if let firmwareVersion {
        w.key("firmwareVersion")
        w.integer(firmwareVersion)
      }
      w.key("forcePINChange")
      w.bool(forcePINChange)
      if let maxMsgSize {
        w.key("maxMsgSize")
        w.integer(maxMsgSize)
      }
      w.key("minPINLength")
      w.integer(minPINLength)
      w.key("options")
      w.object { w in
        for name in options.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
          w.key(name)
          w.bool(options[name]!)
        }
      }
      w.key("pinProtocols")
      w.array { w in for p in pinProtocols { w.integer(p) } }
      if let remainingDiscoverableCredentials {
        w.key("remainingDiscoverableCredentials")
        w.integer(remainingDiscoverableCredentials)
      }
      if let uvRetries {
        w.key("uvRetries")
        w.integer(uvRetries)
      }
      w.key("versions")
      w.strings(versions)
    }
  }
}
