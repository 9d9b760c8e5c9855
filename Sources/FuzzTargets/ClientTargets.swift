import Foundation
import Prompts
import TokenBridge

/// The configuration file: whatever parses must re-validate, written back as JSON, to the same configuration.
enum ConfigTarget {
  static func run(_ data: [UInt8]) {
    guard let c = try? Configuration.parse(data, path: "/fuzz/config.json") else { return }
    check(Configuration.interactionTimeoutRange.contains(c.interactionTimeout), "interactionTimeout out of range")
    check(Configuration.networkTimeoutRange.contains(c.networkTimeout), "networkTimeout out of range")
    check(!c.pivSlots.isEmpty && Set(c.pivSlots).count == c.pivSlots.count, "pivSlots empty or repeated")
    var object: [String: Any] = [
      "pivAAID": c.pivAAID, "fido2AAID": c.fido2AAID, "pivSlots": c.pivSlots,
      "interactionTimeout": c.interactionTimeout, "networkTimeout": c.networkTimeout,
      "fido2ResidentKeys": c.fido2ResidentKeys, "attestationSlot": c.attestationSlot.map { $0 as Any } ?? NSNull(),
    ]
    if let s = c.server { object["server"] = s }
    if let f = c.facetID { object["facetID"] = f }
    guard let json = try? JSONSerialization.data(withJSONObject: object) else {
      return check(false, "a parsed configuration cannot be written as JSON")
    }
    do {
      let again = try Configuration.parse(Array(json), path: "/fuzz/again.json")
      check(again == c, "a parsed configuration re-validates to another one")
    } catch {
      check(false, "a parsed configuration does not re-validate: \(error)")
    }
  }
}

/// The `--pin-fd` reader, fed in chunk sizes the data chooses (first byte: a seed for the sizes; a chunk size of
/// 0 means end of input). Lines must match a plain model of the format, and never exceed the cap.
enum PinFDTarget {
  static func run(_ data: [UInt8]) {
    var input = FuzzInput(data)
    var seed = UInt32(input.byte()) | 1
    let stream = input.rest()
    var offset = 0
    let reader = SecretLineReader(
      source: { buf, _ in
        seed = seed &* 1_103_515_245 &+ 12_345
        let want = Int(seed >> 16) % 600 + 1
        let n = min(want, buf.count, stream.count - offset)
        guard n > 0 else { return 0 }
        buf.copyBytes(from: stream[offset..<offset + n])
        offset += n
        return n
      }, timeout: 60)
    // The model: lines end at \n (a \r before it is dropped); a final line without \n counts; a line over the cap
    // (counted as its bytes before the \n, \r included) ends the input with lineTooLong.
    var expected: [[UInt8]] = []
    var tooLong = false
    var rest = stream[...]
    while !rest.isEmpty {
      let nl = rest.firstIndex(of: 0x0A)
      var line = Array(rest[..<(nl ?? rest.endIndex)])
      if line.count > SecretLineReader.maxLine {
        tooLong = true
        break
      }
      if line.last == 0x0D { line.removeLast() }
      expected.append(line)
      rest = nl.map { rest[($0 + 1)...] } ?? []
    }
    var got: [[UInt8]] = []
    var gotTooLong = false
    while got.count <= expected.count + 1 {
      do {
        guard let secret = try reader.next() else { break }
        check(secret.bytes.count <= SecretLineReader.maxLine, "a line of \(secret.bytes.count) bytes passed the cap")
        got.append(secret.bytes)
      } catch InputError.lineTooLong(let limit) {
        check(limit == SecretLineReader.maxLine, "lineTooLong names another limit")
        gotTooLong = true
        break
      } catch {
        check(false, "unexpected error \(error)")
      }
    }
    check(got == expected, "lines differ from the model: \(got.count) read, \(expected.count) expected")
    check(gotTooLong == tooLong, "lineTooLong: \(gotTooLong), expected \(tooLong)")
  }
}
