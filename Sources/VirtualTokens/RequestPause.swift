import Foundation
import Synchronization

/// Test hook (opt-in, `--pause-dir`): cuts a flow at exactly its k-th request, for the kill sweep
/// (Tests/cli/test_kill_sweep.py). Requests are every APDU (PIV) or every complete CTAPHID message (FIDO2, INIT
/// included) the token receives.
///
/// Protocol, all in one directory the test owns:
/// - The test arms the hook by writing `arm` (atomically: write another name, rename): `N before` or `N after`,
///   or `0 count` to only count. The token reads it at its next request, removes it, and counts from 1 again.
/// - After every request the token writes the count so far to `count`.
/// - At request N the token writes `paused` (holding `N before|after`) and waits until the test removes it (it
///   kills the client first). `before`: the request is then dropped unprocessed (PIV answers 6F00, FIDO2 sends
///   nothing): it reached the token, which did not act. `after`: the request was processed before `paused`
///   was written (its state saved); its answer is sent after, to a client that is gone.
/// The wait ends after 60 s whatever happens, so a test that died never leaves the token stuck.
public final class RequestPause: Sendable {
  public enum Mode: String, Sendable { case before, after, count }

  struct Counting {
    var count = 0
    var target = 0
    var mode = Mode.count
  }

  let dir: String
  let counting = Mutex(Counting())

  public init(directory: String) { dir = directory }

  /// Runs `process` for one request under the hook; `dropped` is the answer of a request cut before the token
  /// acted (nil: no answer at all).
  public func around<R>(_ process: () -> R, dropped: R?) -> R? {
    let (n, m, t) = next()
    if t == n && m == .before {
      pause(n, m)
      return dropped
    }
    let r = process()
    if t == n && m == .after { pause(n, m) }
    return r
  }

  func next() -> (Int, Mode, Int) {
    counting.withLock { c in
      let armPath = dir + "/arm"
      if let text = try? String(contentsOfFile: armPath, encoding: .utf8) {
        try? FileManager.default.removeItem(atPath: armPath)
        let parts = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        c.count = 0
        c.target = parts.first.flatMap { Int($0) } ?? 0
        c.mode = parts.count > 1 ? Mode(rawValue: String(parts[1])) ?? .count : .count
      }
      c.count += 1
      write("count", "\(c.count)\n")
      return (c.count, c.mode, c.target)
    }
  }

  func pause(_ n: Int, _ m: Mode) {
    let path = dir + "/paused"
    write("paused", "\(n) \(m.rawValue)\n")
    let end = Date().addingTimeInterval(60)
    while FileManager.default.fileExists(atPath: path) && Date() < end { usleep(5_000) }
    try? FileManager.default.removeItem(atPath: path)
  }

  func write(_ name: String, _ text: String) {
    let tmp = dir + "/." + name + ".tmp"
    guard FileManager.default.createFile(atPath: tmp, contents: Data(text.utf8)) else { return }
    _ = rename(tmp, dir + "/" + name)
  }
}
