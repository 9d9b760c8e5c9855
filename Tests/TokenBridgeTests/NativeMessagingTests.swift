import Foundation
import Testing

@testable import TokenBridge

/// The native-messaging host's framing, request reading and caller check (docs/web-pages.md).
@Suite struct NativeMessagingTests {
  func frame(_ s: String) -> [UInt8] { NativeMessaging.frame(Array(s.utf8))! }

  func frames(_ bytes: [UInt8], chunk: Int) throws -> [String] {
    var reader = NativeMessaging.FrameReader()
    var out: [String] = []
    var i = 0
    while i < bytes.count {
      reader.append(bytes[i..<min(bytes.count, i + chunk)])
      i += chunk
      while let f = try reader.next() { out.append(String(decoding: f, as: UTF8.self)) }
    }
    try reader.finish()
    return out
  }

  @Test func framesInAnyPieces() throws {
    let stream = frame("{\"a\":1}") + frame("") + frame("[2]")
    for chunk in [1, 2, 3, 5, 7, 100] {
      #expect(try frames(stream, chunk: chunk) == ["{\"a\":1}", "", "[2]"])
    }
    #expect(Array(frame("xy").prefix(4)) == withUnsafeBytes(of: UInt32(2)) { Array($0) })
  }

  /// Past 64 KiB of frames read the reader drops them from its buffer, a frame's start possibly already in it: a
  /// path the fuzz target's inputs (at most 4 KiB) never reach.
  @Test func framesAcrossTheBufferCompaction() throws {
    let payloads = (0..<300).map { i in String(repeating: String(UnicodeScalar(UInt8(65 + i % 26))), count: 500 + i) }
    let stream = payloads.reduce(into: [UInt8]()) { $0 += frame($1) }
    #expect(stream.count > 2 * 64 * 1024)
    for chunk in [777, 4096, 70_000] {
      #expect(try frames(stream, chunk: chunk) == payloads)
    }
  }

  @Test func truncatedAndOversizedFrames() {
    #expect(throws: NativeMessaging.FrameError.truncated(have: 2, want: 4)) { try frames([1, 0], chunk: 9) }
    #expect(throws: NativeMessaging.FrameError.truncated(have: 6, want: 9)) {
      try frames(Array(frame("hello").dropLast(3)), chunk: 4)
    }
    let over = withUnsafeBytes(of: UInt32(NativeMessaging.maxBrowserToHost + 1)) { Array($0) }
    #expect(throws: NativeMessaging.FrameError.oversized(length: UInt32(NativeMessaging.maxBrowserToHost + 1))) {
      try frames(over, chunk: 4)
    }
    #expect(NativeMessaging.frame([UInt8](repeating: 0x20, count: NativeMessaging.maxHostToBrowser + 1)) == nil)
  }

  func parse(_ s: String) throws(BrowserRequest.Invalid) -> BrowserRequest { try BrowserRequest.parse(Array(s.utf8)) }

  @Test func requests() throws {
    #expect(
      try parse(#"{"id":3,"method":"discover","origin":"https://bank.example"}"#)
        == BrowserRequest(id: 3, method: .discover, origin: "https://bank.example"))
    let r = try parse(
      #"{"id":4,"method":"notifyUAFResult","origin":"https://bank.example:8443","uafProtocolMessage":"[]","responseCode":1498}"#
    )
    #expect(try parse(#"{"id":5,"method":"cancel","cancels":4}"#).cancels == 4)
    #expect(r.responseCode == 1498 && r.uafProtocolMessage == "[]" && r.envelope == #"{"uafProtocolMessage":"[]"}"#)
  }

  @Test func refusedRequests() {
    let cases: [(String, Int?, UAFErrorCode)] = [
      ("not json", nil, .protocolError),
      ("[1]", nil, .protocolError),
      (#"{"method":"discover"}"#, nil, .protocolError),
      (#"{"id":1.5,"method":"discover"}"#, nil, .protocolError),
      (#"{"id":"1","method":"discover"}"#, nil, .protocolError),
      (#"{"id":1,"method":"bogus","origin":"https://a.example"}"#, 1, .protocolError),
      (#"{"id":2,"method":"discover"}"#, 2, .untrustedFacetID),
      (#"{"id":3,"method":"discover","origin":"http://a.example"}"#, 3, .insecureTransport),
      (#"{"id":4,"method":"discover","origin":"http://127.0.0.1"}"#, 4, .insecureTransport),
      (#"{"id":5,"method":"discover","origin":"https://a.example/p"}"#, 5, .untrustedFacetID),
      (#"{"id":6,"method":"checkPolicy","origin":"https://a.example"}"#, 6, .protocolError),
      (#"{"id":7,"method":"notifyUAFResult","origin":"https://a.example","uafProtocolMessage":""}"#, 7, .protocolError),
      (#"{"id":8,"method":"cancel"}"#, 8, .protocolError),
    ]
    for (text, id, code) in cases {
      #expect(throws: BrowserRequest.Invalid.self, "\(text)") { try parse(text) }
      do {
        _ = try parse(text)
      } catch {
        #expect(error.id == id && error.code == code, "\(text): \(error)")
      }
    }
  }

  @Test func replies() throws {
    let f = BrowserReply.framed(id: 7, errorCode: .noError, fields: ["uafProtocolMessage": .string("[]")])
    #expect(String(decoding: f.dropFirst(4), as: UTF8.self) == #"{"errorCode":0,"id":7,"uafProtocolMessage":"[]"}"#)
    let huge = String(repeating: "x", count: NativeMessaging.maxHostToBrowser)
    let g = BrowserReply.framed(id: 8, errorCode: .noError, fields: ["uafProtocolMessage": .string(huge)])
    #expect(String(decoding: g.dropFirst(4), as: UTF8.self) == #"{"errorCode":255,"id":8}"#)
  }

  @Test func callers() {
    #expect(BrowserCaller.identify(["chrome-extension://\(BrowserCaller.chromiumExtensionID)/"]) == .chromium)
    #expect(
      BrowserCaller.identify([
        "/usr/lib/mozilla/native-messaging-hosts/org.tokenbridge.uaf.json", "uaf@tokenbridge.org",
      ])
        == .firefox)
    #expect(BrowserCaller.identify([]) == nil)
    #expect(BrowserCaller.identify(["chrome-extension://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/"]) == nil)
    #expect(BrowserCaller.identify(["/x/org.tokenbridge.uaf.json", "other@example.org"]) == nil)
    #expect(BrowserCaller.identify(["/x/other.json", "uaf@tokenbridge.org"]) == nil)
  }
}
