import Foundation
import Synchronization

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// The delegate queue of a capped session: at most `depth` delegate calls wait or run at once. URLSession on
/// Linux (swift-corelibs-foundation) hands every received chunk to the delegate queue without waiting, so a
/// server faster than the delegate would pile chunks up in memory before a cap is even checked (measured: the
/// whole 512 MiB of a hostile answer). Here, queueing a call waits while `depth` are pending, which stops the
/// session reading the socket, and TCP flow control then stops the server.
final class BoundedDelegateQueue: OperationQueue, @unchecked Sendable {
  private let slots: DispatchSemaphore

  init(depth: Int = 8) {
    slots = DispatchSemaphore(value: depth)
    super.init()
    maxConcurrentOperationCount = 1
  }

  override func addOperation(_ block: @escaping @Sendable () -> Void) {
    slots.wait()
    super.addOperation { [slots] in
      block()
      slots.signal()
    }
  }
}

/// One HTTP request at a time, synchronously, with a cap on the answer's body: the body is read in chunks as
/// they arrive and the transfer is cancelled as soon as it passes the cap (or at once when Content-Length
/// already says so), so memory stays bounded whatever a server sends. Every request of `BackendClient` goes
/// through here; redirects are decided by `allowRedirect`.
final class CappedExchange: NSObject, URLSessionDataDelegate, Sendable {
  enum Outcome {
    case answer(Data, HTTPURLResponse)
    case tooLarge
    case failed(Error?)
    case deadlinePassed
  }

  private struct Transfer {
    let limit: Int
    let done: DispatchSemaphore
    var body = Data()
    var response: HTTPURLResponse?
    var tooLarge = false
    var error: Error?
  }

  private let transfers = Mutex<[Int: Transfer]>([:])
  private let allowRedirect: @Sendable (HTTPURLResponse, URLRequest) -> Bool

  init(allowRedirect: @escaping @Sendable (HTTPURLResponse, URLRequest) -> Bool) {
    self.allowRedirect = allowRedirect
  }

  /// Runs `request` on `session` (whose delegate is this object); waits at most until `deadline`.
  func run(_ request: URLRequest, on session: URLSession, limit: Int, deadline: DispatchTime) -> Outcome {
    let task = session.dataTask(with: request)
    let done = DispatchSemaphore(value: 0)
    transfers.withLock { $0[task.taskIdentifier] = Transfer(limit: limit, done: done) }
    task.resume()
    let inTime = done.wait(timeout: deadline) == .success
    // Cancelled from here, never from a delegate call: `cancel` waits for the session's work queue, which may
    // itself wait for the delegate queue (see `BoundedDelegateQueue`).
    task.cancel()
    guard let t = transfers.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return .failed(nil) }
    if t.tooLarge { return .tooLarge }
    if !inTime { return .deadlinePassed }
    if let e = t.error { return .failed(e) }
    guard let response = t.response else { return .failed(nil) }
    return .answer(t.body, response)
  }

  /// Adds `count` bytes (and `data`, if given) to the transfer; true when that passes its cap, which marks
  /// it too large and drops what it held.
  private func exceeds(_ task: URLSessionTask, adding count: Int64, data: Data? = nil) -> Bool {
    transfers.withLock { all in
      let id = task.taskIdentifier
      guard let t = all[id] else { return true }
      if t.tooLarge { return true }
      if Int64(t.body.count) + count > Int64(t.limit) {
        all[id]?.tooLarge = true
        all[id]?.body = Data()
        t.done.signal()  // the caller stops waiting and cancels the task
        return true
      }
      if let data { all[id]?.body.append(data) }  // in place: no copy of what came before
      return false
    }
  }

  func urlSession(
    _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
  ) {
    if response.expectedContentLength > 0 && exceeds(dataTask, adding: response.expectedContentLength) {
      completionHandler(.cancel)  // swift-corelibs-foundation ignores it: the waiting caller cancels
      return
    }
    transfers.withLock { $0[dataTask.taskIdentifier]?.response = response as? HTTPURLResponse }
    completionHandler(.allow)
  }

  func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
    _ = exceeds(dataTask, adding: Int64(data.count), data: data)
  }

  func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
    let done = transfers.withLock { all -> DispatchSemaphore? in
      all[task.taskIdentifier]?.error = error
      return all[task.taskIdentifier]?.done
    }
    done?.signal()
  }

  func urlSession(
    _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
    newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void
  ) {
    completionHandler(allowRedirect(response, request) ? request : nil)
  }
}
