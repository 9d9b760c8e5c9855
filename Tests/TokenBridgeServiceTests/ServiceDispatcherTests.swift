import DBus
import Testing
import TokenBridge

@testable import TokenBridgeService
@testable import TokenDevices

/// The service's decisions (docs/dbus-api.md) against a fake bus and fake operations: who may act for a web origin,
/// which tokens are busy, who may cancel a request and what cancels it, when the service is idle.
@Suite struct ServiceDispatcherTests {
  let bus = FakeBus()
  let operations = FakeOperations()
  let dispatcher: ServiceDispatcher

  init() {
    dispatcher = ServiceDispatcher(
      bus: bus, configuration: Configuration(), operations: operations, idleTimeout: .seconds(60),
      pool: TokenWorkPool(limits: .init(workers: 1, perCaller: 3, total: 100)), uid: 1000,
      identify: { creds in
        guard case .uint32(let pid)? = creds["ProcessID"] else { return nil }
        return CallerIdentity(kind: .executable, name: "/usr/bin/app\(pid)")
      })
  }

  func process(from sender: String, _ message: String, token: String? = nil, origin: String? = nil) {
    var options: [DBusValue.DictEntry] = []
    if let token { options.append(.init("token", .string(token))) }
    if let origin { options.append(.init("origin", .string(origin))) }
    let call = FakeCall(
      from: sender, "ProcessUAFOperation", [.string(""), .string(message), .string(""), .dict(options)])
    #expect(dispatcher.handleMain(call))
  }

  func lastError() -> String? { bus.errors.last.map { "\($0.name) \($0.message)" } }

  @Test func originRules() {
    let browser = CallerIdentity(kind: .flatpak, name: "org.mozilla.firefox")
    let other = CallerIdentity(kind: .executable, name: "/usr/bin/other")
    let callers = [browser.facetID]
    func facet(_ who: CallerIdentity, _ origin: DBusValue?) -> Result<String, ServiceDispatcher.Refusal> {
      ServiceDispatcher.facet(
        of: who, options: .dict(origin.map { [.init("origin", .variant($0))] } ?? []), originCallers: callers)
    }
    #expect(facet(other, nil) == .success("unix:exe:/usr/bin/other"))
    #expect(facet(browser, .string("https://bank.example")) == .success("https://bank.example"))
    #expect(facet(browser, .string("https://bank.example:8443")) == .success("https://bank.example:8443"))
    #expect(facet(browser, .string("http://127.0.0.1:8080")) == .success("http://127.0.0.1:8080"))
    #expect(facet(browser, .string("http://localhost")) == .success("http://localhost"))
    for refused in ["http://bank.example", "https://bank.example/login", "https://bank.example?x=1", "ftp://bank", ""] {
      guard case .failure(let r) = facet(browser, .string(refused)) else {
        Issue.record("\(refused) was accepted")
        continue
      }
      #expect(r.name == "InvalidArgs" && r.code == .protocolError)
    }
    guard case .failure(let r) = facet(other, .string("https://bank.example")) else {
      Issue.record("a caller not in serviceOriginCallers acted for an origin")
      return
    }
    #expect(r.name == "AccessDenied" && r.code == .authenticatorAccessDenied)
  }

  @Test func anOriginFromACallerNotListedIsRefusedOnTheBus() {
    process(from: ":1.5", "m", origin: "https://bank.example")
    #expect(lastError()?.hasPrefix(ServiceDispatcher.errorPrefix + "AccessDenied 12: ") == true)
    #expect(dispatcher.requests.isEmpty)
  }

  @Test func aCallerOfAnotherUserIsRefused() {
    bus.uids[":1.9"] = 0
    #expect(dispatcher.handleMain(FakeCall(from: ":1.9", "Discover")))
    #expect(lastError() == ServiceDispatcher.errorPrefix + "AccessDenied 12: a caller of another user is refused")
  }

  @Test func aWrongSignatureOrOptionTypeIsInvalidArgs() {
    #expect(dispatcher.handleMain(FakeCall(from: ":1.5", "CheckPolicy", [.string("x")])))
    #expect(lastError()?.hasPrefix(ServiceDispatcher.errorPrefix + "InvalidArgs 6: CheckPolicy takes") == true)
    let badOption = DBusValue.dict([.init("token", .variant(.uint32(1)))])
    #expect(dispatcher.handleMain(FakeCall(from: ":1.5", "ListTokens", [badOption])))
    #expect(lastError() == ServiceDispatcher.errorPrefix + "InvalidArgs 6: the option token is a string (s)")
    #expect(!dispatcher.handleMain(FakeCall(from: ":1.5", "NoSuchMethod")))
  }

  @Test func oneOperationPerToken() {
    process(from: ":1.5", "a", token: "piv-1")
    #expect(bus.replies.last == [.objectPath(ServiceDispatcher.requestPrefix + "/1")])
    process(from: ":1.6", "b", token: "piv-1")
    #expect(lastError() == ServiceDispatcher.errorPrefix + "Busy 15: an operation is running on piv-1")
    process(from: ":1.6", "c")
    #expect(lastError() == ServiceDispatcher.errorPrefix + "Busy 15: an operation is running on a token")
    process(from: ":1.6", "d", token: "fido2-1")
    #expect(bus.replies.last == [.objectPath(ServiceDispatcher.requestPrefix + "/2")])
    operations.release("a")
    operations.release("d")
    #expect(settle(dispatcher) { dispatcher.requests.isEmpty })
    #expect(dispatcher.busy.isEmpty)
    process(from: ":1.6", "e")
    #expect(bus.replies.last == [.objectPath(ServiceDispatcher.requestPrefix + "/3")])
    operations.release("e")
    #expect(settle(dispatcher) { dispatcher.requests.isEmpty })
  }

  @Test func onlyTheCallerClosesItsRequestAndTheResponseIsUnicast() {
    process(from: ":1.5", "a")
    let path = ServiceDispatcher.requestPrefix + "/1"
    let close = { (sender: String) in
      #expect(self.dispatcher.handleRequest(FakeCall(from: sender, "Close", path: path, interface: nil)))
    }
    close(":1.6")
    #expect(lastError()?.hasPrefix(ServiceDispatcher.errorPrefix + "AccessDenied 12: ") == true)
    #expect(!dispatcher.requests[path]!.control.isCancelled)
    close(":1.5")
    #expect(settle(dispatcher) { !bus.signals.isEmpty })
    #expect(bus.signals.map(\.destination) == [":1.5"])
    #expect(bus.signals.first?.values.first == .uint32(1))
    close(":1.5")
    #expect(lastError() == ServiceDispatcher.errorPrefix + "NotFound 255: no request \(path)")
  }

  /// A registration is kept locally exactly when its answer goes out: one whose request was closed before is
  /// abandoned, and the caller hears Cancelled.
  @Test func aRegistrationIsKeptOnlyWhenItsAnswerGoesOut() {
    let registered = RequestOutcome(
      response: 0,
      results: [
        .init("message", .string("{}")), .init("errorCode", .uint32(0)), .init("registeredKeyID", .string("k1")),
      ])
    process(from: ":1.5", "a", token: "piv-1")
    dispatcher.requests.values.first!.control.cancel()
    dispatcher.sendResponse(ServiceDispatcher.requestPrefix + "/1", registered)
    #expect(operations.settled.withLock { $0 } == ["k1 abandoned"])
    #expect(bus.signals.last?.values.first == .uint32(1))
    process(from: ":1.5", "b", token: "piv-2")
    var second = registered
    second.results[2] = .init("registeredKeyID", .string("k2"))
    dispatcher.sendResponse(ServiceDispatcher.requestPrefix + "/2", second)
    #expect(operations.settled.withLock { $0 } == ["k1 abandoned", "k2 kept"])
    #expect(
      bus.signals.last?.values == [
        .uint32(0), .dict([.init("message", .string("{}")), .init("errorCode", .uint32(0))]),
      ])
    #expect(dispatcher.busy.isEmpty)
  }

  /// A caller that left while the token finished, before its NameOwnerChanged was read: the bus daemon no longer
  /// knows it, so its registration is abandoned and nothing is kept for an answer nobody receives.
  @Test func aRegistrationForACallerNoLongerOnTheBusIsNotKept() {
    process(from: ":1.5", "a", token: "piv-1")
    bus.gone = [":1.5"]
    dispatcher.sendResponse(
      ServiceDispatcher.requestPrefix + "/1",
      RequestOutcome(
        response: 0,
        results: [
          .init("message", .string("{}")), .init("errorCode", .uint32(0)), .init("registeredKeyID", .string("k1")),
        ]))
    #expect(operations.settled.withLock { $0 } == ["k1 abandoned"])
    #expect(bus.signals.last?.values.first == .uint32(1))
    #expect(dispatcher.busy.isEmpty && dispatcher.requests.isEmpty)
  }

  @Test func aCallerLeavingTheBusCancelsItsRequestsOnly() {
    process(from: ":1.5", "a", token: "piv-1")
    process(from: ":1.6", "b", token: "fido2-1")
    let leave = FakeCall(
      from: "org.freedesktop.DBus", "NameOwnerChanged", [.string(":1.5"), .string(":1.5"), .string("")],
      path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", isMethodCall: false)
    _ = dispatcher.nameOwnerChanged(leave)
    #expect(settle(dispatcher) { dispatcher.requests.count == 1 })
    #expect(bus.signals.map(\.destination) == [":1.5"])
    #expect(dispatcher.busy == ["fido2-1": ServiceDispatcher.requestPrefix + "/2"])
    operations.release("b")
    #expect(settle(dispatcher) { dispatcher.requests.isEmpty })
  }

  @Test func aCallerOverItsBoundIsBusyAndAnotherIsServed() {
    operations.holdDiscover.withLock { $0 = true }
    for _ in 0..<5 { #expect(dispatcher.handleMain(FakeCall(from: ":1.5", "Discover"))) }
    #expect(bus.errors.count == 2)
    #expect(bus.errors.allSatisfy { $0.name == ServiceDispatcher.errorPrefix + "Busy" && $0.message.hasPrefix("15: ") })
    #expect(dispatcher.handleMain(FakeCall(from: ":1.6", "ListTokens", [.dict([])])))
    #expect(bus.errors.count == 2)
    operations.holdDiscover.withLock { $0 = false }
    #expect(settle(dispatcher) { bus.replies.count == 4 })
    #expect(dispatcher.pendingCalls.isEmpty)
  }

  /// A listing stuck in PC/SC (a pcscd that stopped) is answered at its deadline, and its late outcome dropped;
  /// CheckPolicy still answers a code.
  @Test func aCallWhoseWorkDoesNotEndIsAnsweredAtItsDeadline() {
    operations.holdDiscover.withLock { $0 = true }
    #expect(dispatcher.handleMain(FakeCall(from: ":1.5", "Discover")))
    dispatcher.expireOverdueCalls(now: .now + .seconds(19))
    #expect(bus.sent.isEmpty)
    #expect(!dispatcher.isIdle(now: .now + .seconds(3600)))
    dispatcher.expireOverdueCalls(now: .now + .seconds(21))
    #expect(bus.errors.map(\.name) == [ServiceDispatcher.errorPrefix + "Failed"])
    #expect(bus.errors.first?.message.hasPrefix("5: The PC/SC service (pcscd) does not answer") == true)
    #expect(dispatcher.pendingCalls.isEmpty)
    #expect(dispatcher.isIdle(now: .now + .seconds(3600)))
    operations.holdDiscover.withLock { $0 = false }
    #expect(settle(dispatcher) { operations.pool(dispatcher) == 0 })
    #expect(bus.sent.count == 1)
  }

  /// What listings answer from while a token is busy: a full listing replaces it, an operation on one named token
  /// replaces only that token's entry.
  @Test func theTokensLastFoundAreReplacedOnlyWhereAListingSawThem() {
    func info(_ id: String, _ name: String) -> TokenInfo {
      TokenInfo(id: id, kind: .piv, name: name, reader: nil, capabilities: [])
    }
    dispatcher.outbox.post(.seen([info("piv-1", "one"), info("piv-2", "two")]))
    dispatcher.outbox.post(.seenSome([info("piv-2", "two again")]))
    dispatcher.drainOutbox()
    #expect(dispatcher.seen.map(\.name) == ["one", "two again"])
    #expect(dispatcher.snapshot().seen.map(\.name) == ["one", "two again"])
    dispatcher.outbox.post(.seen([info("piv-3", "three")]))
    dispatcher.drainOutbox()
    #expect(dispatcher.seen.map(\.id) == ["piv-3"])
  }

  @Test func idleOnlyWithNothingOpenAndAfterTheTimeout() {
    let start = dispatcher.lastActivity
    #expect(!dispatcher.isIdle(now: start + .seconds(59)))
    #expect(dispatcher.isIdle(now: start + .seconds(60)))
    process(from: ":1.5", "a")
    #expect(!dispatcher.isIdle(now: .now + .seconds(3600)))
    operations.release("a")
    #expect(settle(dispatcher) { dispatcher.requests.isEmpty })
    #expect(dispatcher.isIdle(now: dispatcher.lastActivity + .seconds(60)))
    let never = ServiceDispatcher(
      bus: bus, configuration: Configuration(), operations: operations, idleTimeout: nil, uid: 1000)
    #expect(!never.isIdle(now: .now + .seconds(86_400)))
  }
}
