import Foundation
import Testing

@testable import Prompts
import TokenBridge

/// `--pin-fd` reading: blocks, a line cap (a longer line is refused without keeping it), a deadline.
@Suite struct SecretLineReaderTests {
  /// A reader over `data`, handed out `chunk` bytes at a time.
  func reader(_ data: [UInt8], chunk: Int = 7) -> SecretLineReader {
    var rest = data[...]
    return SecretLineReader(
      source: { buf, _ in
        let n = min(chunk, buf.count, rest.count)
        for i in 0..<n { buf[i] = rest[rest.startIndex + i] }
        rest = rest.dropFirst(n)
        return n
      }, timeout: 5)
  }

  func lines(_ s: String, chunk: Int = 7) throws -> [String] {
    let r = reader(Array(s.utf8), chunk: chunk)
    var out: [String] = []
    while let l = try r.next() { out.append(String(decoding: l.bytes, as: UTF8.self)) }
    return out
  }

  @Test func linesInBlocks() throws {
    #expect(try lines("123456\n654321\n") == ["123456", "654321"])
    #expect(try lines("123456\r\n654321", chunk: 1) == ["123456", "654321"])
    #expect(try lines("a\n\nb\n", chunk: 100) == ["a", "", "b"])
    #expect(try lines("") == [])
  }

  @Test func aLongLineIsRefusedWithoutKeepingIt() throws {
    let exact = String(repeating: "1", count: SecretLineReader.maxLine)
    #expect(try lines(exact + "\n") == [exact])
    #expect(throws: InputError.lineTooLong(limit: SecretLineReader.maxLine)) {
      try lines(exact + "1\n")
    }
    // 20 MB without a newline: refused after the cap, not read to the end.
    var served = 0
    let big = SecretLineReader(
      source: { buf, _ in
        for i in 0..<buf.count { buf[i] = 0x31 }
        served += buf.count
        return buf.count
      }, timeout: 5)
    #expect(throws: InputError.lineTooLong(limit: SecretLineReader.maxLine)) { _ = try big.next() }
    #expect(served < 4096)
  }

  /// A descriptor that never delivers ends at the deadline (a pipe nobody writes to).
  @Test func aSilentDescriptorTimesOut() throws {
    var fds: [Int32] = [0, 0]
    #expect(pipe(&fds) == 0)
    defer {
      close(fds[0])
      close(fds[1])
    }
    let r = SecretLineReader(fd: fds[0], timeout: 0.3)
    #expect(throws: InteractionError.timedOut) { _ = try r.next() }
  }
}
