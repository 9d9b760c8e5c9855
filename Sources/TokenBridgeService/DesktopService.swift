import DBus
import Glibc
import Platform
import Prompts
import TokenBridge

/// Why the service could not start or stopped serving: the bus refused it (no bus, the name owned by another).
public struct ServiceBusError: Error, Equatable, Sendable {
  public var message: String
}

/// The service on a real bus (`tokenbridge serve`): one thread owns the sd-bus connection (sd-bus is not
/// thread-safe), dispatches what arrives, drains the outbox the workers fill, and ends once idle.
public final class DesktopService {
  let bus: SDBus
  let dispatcher: ServiceDispatcher

  /// Connects (the session bus, or `address`) and takes the bus name. `idleTimeout` 0: never idle. `callTimeout`:
  /// how long a listing or policy check may take before its caller gets an error.
  /// Each request asks through pinentry with the prompter the CLI uses (`Prompter.requestVerifier`).
  public init(address: String?, configuration: Configuration, idleTimeout: Double, callTimeout: Double = 20) throws {
    do {
      bus = try SDBus(address: address)
      dispatcher = ServiceDispatcher(
        bus: bus, configuration: configuration, operations: LibraryOperations(verifiers: Prompter.requestVerifier),
        idleTimeout: idleTimeout > 0 ? .milliseconds(Int64(idleTimeout * 1000)) : nil,
        callTimeout: .milliseconds(Int64(callTimeout * 1000)))
      let connection = bus.connection
      try connection.addObject(ServiceDispatcher.objectPath) { [unowned dispatcher] call in
        dispatcher.handleMain(call)
      }
      try connection.addFallback(ServiceDispatcher.requestPrefix) { [unowned dispatcher] call in
        dispatcher.handleRequest(call)
      }
      try connection.addMatch(
        "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged'"
      ) { [unowned dispatcher] signal in dispatcher.nameOwnerChanged(signal) }
      try connection.requestName(ServiceDispatcher.busName)
    } catch let e as DBusError {
      throw ServiceBusError(message: e.message)
    }
  }

  /// Serves until idle, then gives the bus name back and answers every call that reached the service before
  /// that (the bus routes the later ones to the next instance it starts), then returns.
  public func run() throws(ServiceBusError) {
    signal(SIGPIPE, SIG_IGN)
    let connection = bus.connection
    do {
      while true {
        try serveOnce()
        if dispatcher.isIdle() { break }
        waitForInput()
      }
      // The bus routed every call it sent here before the release ahead of its reply: once it returned, they are
      // all read or readable, and `dispatch` handles them all (it reads until nothing is left).
      try connection.releaseName(ServiceDispatcher.busName)
      while true {
        try serveOnce()
        if dispatcher.hasNoWork { return }
        waitForInput()
      }
    } catch {
      throw ServiceBusError(message: error.message)
    }
  }

  /// Handles what has arrived, then answers what the workers finished.
  func serveOnce() throws(DBusError) {
    let connection = bus.connection
    try connection.dispatch()
    dispatcher.drainOutbox()
    dispatcher.expireOverdueCalls()
    connection.flush()
  }

  /// Sleeps until the bus or the outbox has something, sd-bus's own deadline, or a second (the idle check).
  func waitForInput() {
    let state = bus.connection.pollState
    var fds = [
      pollfd(fd: state.fd, events: state.events, revents: 0),
      pollfd(fd: dispatcher.outbox.readFD, events: Int16(POLLIN), revents: 0),
    ]
    var ms: Int32 = 1000
    if let deadline = state.deadlineMicros {
      var now = timespec()
      clock_gettime(CLOCK_MONOTONIC, &now)
      let nowMicros = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
      ms = deadline <= nowMicros ? 0 : Int32(clamping: (deadline - nowMicros) / 1000 + 1)
      ms = min(ms, 1000)
    }
    _ = poll(&fds, 2, ms)
    if fds[1].revents != 0 { dispatcher.outbox.clearWake() }
  }
}
