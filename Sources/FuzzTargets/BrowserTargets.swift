import Foundation
import TokenBridge

/// The browser host's input (`tokenbridge browser-host`): the data is the byte stream a browser writes on the host's
/// stdin, handed to `NativeMessaging.FrameReader` in pieces whose sizes the data's first bytes choose; each frame goes
/// through `BrowserRequest.parse` and, when it names a call, into a reply (up to the first frame that names none, where
/// the host ends the connection). Properties: a frame read is never larger
/// than the bound and is exactly the bytes its header announced, in order (the frames re-framed are a prefix of the
/// stream); a stream that ends cleanly is all frames; an accepted request has an id a JavaScript number holds, a
/// known method and an https origin (a cancel: none); a reply is a frame a browser takes (at most 1 MiB) that reads back as a JSON
/// object with the call's id.
enum NativeMessagingTarget {
  static func run(_ data: [UInt8]) {
    var input = FuzzInput(data)
    let pieces = (0..<4).map { _ in Int(input.byte() % 17) + 1 }
    let stream = input.rest()
    var reader = NativeMessaging.FrameReader()
    // How much of the stream the frames read so far make again once re-framed: each frame is compared with the
    // stream at that point only (comparing the whole prefix again at each frame made an input of many small frames
    // quadratic: a 4 KiB input of empty frames took 66 ms).
    var reframed = 0
    var offset = 0
    var turn = 0
    var failed = false
    // The host answers frames until one that names no call, where it ends the connection (BrowserHost); the
    // frames after it are still read and checked as frames, not answered.
    var open = true
    feed: while offset < stream.count {
      let n = min(pieces[turn % pieces.count], stream.count - offset)
      turn += 1
      reader.append(stream[offset..<offset + n])
      offset += n
      while true {
        let frame: [UInt8]?
        do { frame = try reader.next() } catch {
          failed = true
          break feed
        }
        guard let frame else { break }
        check(frame.count <= NativeMessaging.maxBrowserToHost, "a frame over the bound")
        guard let framed = NativeMessaging.frame(frame) else {
          check(false, "a frame read cannot be framed again")
          return
        }
        check(matches(framed, stream, at: reframed), "frames read are not the stream's frames in order")
        reframed += framed.count
        if open { open = answer(frame) }
      }
    }
    if !failed, (try? reader.finish()) != nil {
      check(reframed == stream.count, "a stream that ended cleanly is not exactly its frames")
    }
  }

  /// Whether `stream` holds `bytes` at `offset` (one memcmp: a byte loop here would be instrumented like the code
  /// under test, each byte a comparison the fuzzer traces).
  static func matches(_ bytes: [UInt8], _ stream: [UInt8], at offset: Int) -> Bool {
    guard offset + bytes.count <= stream.count else { return false }
    return bytes.withUnsafeBytes { b in
      stream.withUnsafeBytes { s in memcmp(b.baseAddress!, s.baseAddress! + offset, b.count) == 0 }
    }
  }

  /// False when the frame names no call: the host ends the connection there.
  static func answer(_ frame: [UInt8]) -> Bool {
    let id: Int
    var code = UAFErrorCode.noError
    do {
      let r = try BrowserRequest.parse(frame)
      check(r.id >= 0 && r.id <= BrowserRequest.maxID, "an id out of range")
      check(
        r.method == .cancel || (r.origin.hasPrefix("https://") && r.origin.utf8.count <= 2048),
        "an accepted origin that is not https")
      check(BrowserRequest.Method(rawValue: r.method.rawValue) == r.method, "an unknown method")
      id = r.id
    } catch {
      guard let known = error.id else { return false }
      check(error.code != .noError, "a refusal without a code")
      id = known
      code = error.code
    }
    let message = String(decoding: frame, as: UTF8.self)
    let reply = BrowserReply.framed(id: id, errorCode: code, fields: ["uafProtocolMessage": .string(message)])
    check(reply.count >= 4 && reply.count <= NativeMessaging.maxHostToBrowser + 4, "a reply a browser refuses")
    var reader = NativeMessaging.FrameReader()
    reader.append(reply)
    guard let body = try? reader.next(),
      let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
      (object["id"] as? NSNumber)?.intValue == id
    else {
      check(false, "a reply that does not read back with its id")
      return true
    }
    return true
  }
}
