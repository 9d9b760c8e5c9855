import SystemCrypto
import Foundation
import Synchronization
import Testing
import TokenBridge
import TokenDevices
import UAFCore

/// PIV session and operations through the real pcscd, the vpcd driver and the virtual card.
/// Needs the private pcscd of `Tools/with-pcscd` (Tools/test provides it); disabled, and so reported, without.
@Suite(.tags(.pcscd), .serialized, .enabled(if: hasPrivatePCSCD, "needs the private pcscd: run Tools/test"))
struct PIVThroughPCSCDTests {
  func discovered(_ id: String) throws -> DiscoveredToken {
    try #require(try TokenDiscovery().discover().found.first { $0.info.id == id })
  }

  @Test func discoveryFindsTheCardWithAStableID() throws {
    let card = try VirtualCard(serial: 4_200_001)
    let result = try TokenDiscovery().discover()
    let t = try #require(result.tokens.first { $0.reader == card.reader })
    #expect(t.id == "piv-4200001")
    #expect(t.kind == .piv && t.capabilities == ["piv"])
    #expect(t.pin?.retriesLeft == 3 && t.pin?.maxRetries == 3 && t.pin?.isDefault == true)
    #expect(result.emptyReaders == ["Virtual PCD 00 01"])
  }

  @Test func readingStatusSpendsNoTry() throws {
    let card = try VirtualCard()
    let s = try card.open()
    #expect(throws: TokenError.wrongPIN(.pin, retriesLeft: 2)) { try s.verifyPIN(Array("000000".utf8)) }
    for _ in 0..<3 { #expect(try s.pinStatus(.pin).retriesLeft == 2) }
  }

  @Test func cardWithoutMetadataUsesEmptyVerify() throws {
    // A card of SP 800-73-4 only (GET METADATA answers 6D00): the card's answer decides, not a version.
    let card = try VirtualCard(arguments: ["--profile", "generic"])
    let s = try card.open()
    #expect(try s.pinStatus(.pin) == PINStatus(kind: .pin, retriesLeft: 5))
    #expect(s.quirks.contains(.noMetadata))
    #expect(try s.pinStatus(.puk).retriesLeft == nil)  // PUK count is unknowable without metadata
    try s.verifyPIN(Array("123456".utf8))
    // Verified already: the empty VERIFY answers 9000; VERIFY P1=FF (SP 800-73-4 §3.2.1) drops the state, so
    // the count shows again.
    #expect(try s.pinStatus(.pin) == PINStatus(kind: .pin, retriesLeft: 5))
    #expect(s.quirks.contains(.verifyReset))
  }

  @Test func pinChangeRecoversFromAWrongCurrentPIN() throws {
    let card = try VirtualCard(serial: 4_200_002)
    let changer = ScriptedChanger([("654321", "111111"), ("123456", "111111")])
    try PinChange(operation: .changePIN).run(on: try discovered("piv-4200002"), changer: changer)
    #expect(changer.contexts.count == 2)
    #expect(changer.contexts[0].protection == .unlocked(retriesLeft: 3))
    #expect(changer.contexts[1].lastRecoverableError == .wrong(.pin, retriesLeft: 2))
    #expect(changer.contexts[1].protection == .lastAttemptFailed(retriesLeft: 2, coolDownSeconds: 0))
    let s = try card.open()
    try s.verifyPIN(Array("111111".utf8))
    #expect(try s.pinStatus(.pin).retriesLeft == 3)
  }

  @Test func policyViolationsSpendNoTry() throws {
    let card = try VirtualCard(serial: 4_200_003)
    let changer = ScriptedChanger([
      ("123456", ""), ("123456", "12a456"), ("123456", "12345"), ("123456", "123456789"), ("123456", "123456"),
      ("123456789", "111111"),
    ])
    #expect(throws: OperationError.cancelled) {
      try PinChange(operation: .changePIN).run(on: try discovered("piv-4200003"), changer: changer)
    }
    let errors = changer.contexts.dropFirst().map(\.lastRecoverableError)
    #expect(
      errors == [
        .invalidNew(.pin, .empty), .invalidNew(.pin, .onlyNumbers), .invalidNew(.pin, .tooShort(minimum: 6)),
        .invalidNew(.pin, .tooLong(maximum: 8)), .invalidNew(.pin, .sameAsOld),
        .invalidCurrent(.pin, .tooLong(maximum: 8)),
      ])
    #expect(try card.open().pinStatus(.pin).retriesLeft == 3)
  }

  @Test func lastAttemptNeedsAnExplicitYes() throws {
    let card = try VirtualCard(serial: 4_200_004)
    let s = try card.open()
    for _ in 0..<2 { _ = try? s.verifyPIN(Array("000000".utf8)) }
    let no = ScriptedChanger([("123456", "111111")], confirmLast: false)
    #expect(throws: OperationError.cancelled) {
      try PinChange(operation: .changePIN).run(on: try discovered("piv-4200004"), changer: no)
    }
    #expect(no.confirmations == 1)
    #expect(try s.pinStatus(.pin).retriesLeft == 1)
    let yes = ScriptedChanger([("123456", "111111")], confirmLast: true)
    try PinChange(operation: .changePIN).run(on: try discovered("piv-4200004"), changer: yes)
    #expect(try s.pinStatus(.pin).retriesLeft == 3)
  }

  @Test func blockedPINIsUnblockedWithThePUK() throws {
    let card = try VirtualCard(serial: 4_200_005)
    let wrong = ScriptedChanger([("000000", "111111"), ("000001", "111111"), ("000002", "111111")], confirmLast: true)
    do {
      try PinChange(operation: .changePIN).run(on: try discovered("piv-4200005"), changer: wrong)
      Issue.record("expected the PIN to block")
    } catch let e as OperationError {
      guard case .blocked(let kind, _) = e else { throw e }
      #expect(kind == .pin)
    }
    let unblock = ScriptedChanger([("00000000", "222222"), ("12345678", "222222")])
    try PinChange(operation: .unblockPIN).run(on: try discovered("piv-4200005"), changer: unblock)
    #expect(unblock.contexts[1].lastRecoverableError == .wrong(.puk, retriesLeft: 2))
    let s = try card.open()
    try s.verifyPIN(Array("222222".utf8))
    #expect(try s.pinStatus(.puk).retriesLeft == 3)
  }

  @Test func pukChange() throws {
    let card = try VirtualCard(serial: 4_200_006)
    try PinChange(operation: .changePUK).run(
      on: try discovered("piv-4200006"), changer: ScriptedChanger([("12345678", "87654321")]))
    let s = try card.open()
    #expect(try s.pinStatus(.puk) == PINStatus(kind: .puk, retriesLeft: 3, maxRetries: 3, isDefault: false))
  }

  @Test(arguments: [[], ["--management-algorithm", "aes192", "--firmware", "5.7.1"]])
  func managementKeyAuthentication(_ args: [String]) throws {
    let card = try VirtualCard(arguments: args)
    let s = try card.open()
    #expect(try s.managementKeyAlgorithm() == (args.isEmpty ? .tripleDES : .aes192))
    #expect(throws: TokenError.managementKeyRejected) {
      try s.authenticateManagementKey(.key([UInt8](repeating: 0x11, count: 24)))
    }
    try s.authenticateManagementKey(.defaultKey)
  }

  @Test func pinProtectedManagementKey() throws {
    let card = try VirtualCard()
    let s = try card.open()
    let key = [UInt8](repeating: 0x42, count: 24)
    // Store it the way yubikey-manager does: admin data flag 0x02, key in printed information 88/89.
    try s.transact { () throws(TokenError) in
      try s.authenticateManagementKey(.defaultKey)
      try s.writeObject(0x5FFF00, BERTLV.encode(0x80, BERTLV.encode(0x81, [0x02])))
      try s.writeObject(0x5FC109, BERTLV.encode(0x88, BERTLV.encode(0x89, key)), sensitive: true)
      // And make it the card's key (Yubico SET MANAGEMENT KEY).
      let r: APDUResponse
      do {
        r = try s.card.send(APDU(ins: 0xFF, p1: 0xFF, p2: 0xFF, data: [0x03, 0x9B, 24] + key, sensitive: true))
      } catch let e as SmartCardError { throw .smartCard(e) } catch { throw .unsupported("\(error)") }
      guard r.statusWord == .success else { throw .unexpectedStatus(r.statusWord, operation: "SET MANAGEMENT KEY") }
    }
    #expect(try s.hasPINProtectedManagementKey())
    #expect(throws: TokenError.managementKeyRejected) { try s.authenticateManagementKey(.defaultKey) }
    try s.authenticateManagementKey(.pinProtected, pin: Array("123456".utf8))
  }

  @Test func generateSignAndRefuseToOverwrite() throws {
    let card = try VirtualCard(serial: 4_200_007)
    let keys = PIVKeys(token: try discovered("piv-4200007"))
    let slot = PIVSlot(rawValue: 0x82)
    let point = try keys.generate(
      slot: slot, managementKey: .defaultKey, force: false, verifier: ScriptedVerifier([]),
      confirmOverwrite: { _ in
        Issue.record("slot was empty")
        return false
      })
    let verifier = ScriptedVerifier(["000000", "123456"])
    let sig = try keys.sign(slot: slot, message: Array("hello".utf8), verifier: verifier)
    #expect(verifier.contexts.last?.lastRecoverableError == .wrong(.pin, retriesLeft: 2))
    let pub = try P256.Signing.PublicKey(x963Representation: point)
    #expect(
      pub.isValidSignature(
        try P256.Signing.ECDSASignature(derRepresentation: sig), for: SHA256.hash(data: Array("hello".utf8))))
    var asked = 0
    #expect(throws: OperationError.slotOccupied(slot)) {
      try keys.generate(
        slot: slot, managementKey: .defaultKey, force: false, verifier: ScriptedVerifier([]),
        confirmOverwrite: { _ in
          asked += 1
          return false
        })
    }
    #expect(asked == 1)
    #expect(try keys.publicKey(slot: slot) == point)
    _ = card
  }

  @Test func removalMidOperationIsReportedAndReinsertionRecovers() throws {
    let card = try VirtualCard()
    let s = try card.open()
    #expect(try s.pinStatus(.pin).retriesLeft == 3)
    try card.remove()
    do {
      _ = try s.pinStatus(.pin)
      Issue.record("expected a removal error")
    } catch .smartCard(let e) {
      if case .cardRemoved = e {} else { Issue.record("unexpected \(e)") }
    }
    try card.insert()
    #expect(try card.open().pinStatus(.pin).retriesLeft == 3)
  }

  @Test func aSecondProcessWaitsForTheTransaction() throws {
    let card = try VirtualCard()
    let holder = try card.open()
    let other = Passed(try card.open())
    let done = Flag()
    try holder.card.transport.beginTransaction()
    let thread = Thread {
      _ = try? other.take()?.pinStatus(.pin)
      done.set()
    }
    thread.start()
    usleep(500_000)
    #expect(!done.value, "the second session ran while the first held the card")
    holder.card.transport.endTransaction()
    for _ in 0..<100 where !done.value { usleep(50_000) }
    #expect(done.value)
  }

  @Test func aHeldCardKeepsASecondProcessOutUntilReleased() throws {
    let card = try VirtualCard()
    let other = Passed(try card.open())  // opening SELECTs: before the holder takes the card
    let holder = try card.open()
    holder.holdsCard = true
    _ = try holder.pinStatus(.pin)  // the next operation begins a transaction, and it is kept
    let done = Flag()
    let thread = Thread {
      _ = try? other.take()?.pinStatus(.pin)
      done.set()
    }
    thread.start()
    usleep(500_000)
    #expect(!done.value, "the second session ran while the first held the card")
    holder.releaseCard()
    for _ in 0..<100 where !done.value { usleep(50_000) }
    #expect(done.value)
  }

  @Test func aHeldCardIsSelectedOnceAndItsTriesReadOnce() throws {
    let card = try VirtualCard()
    let s = try card.open()
    s.holdsCard = true
    #expect(try s.pinStatus(.pin).retriesLeft == 3)
    let afterFirst = s.card.transmitCount
    #expect(try s.pinStatus(.pin).retriesLeft == 3)
    #expect(s.card.transmitCount == afterFirst, "the tries were read twice in one held transaction")
    // A wrong PIN's 63C2 is the next count: no read for it.
    #expect(throws: TokenError.wrongPIN(.pin, retriesLeft: 2)) { try s.verifyPIN(Array("000000".utf8)) }
    let afterWrong = s.card.transmitCount
    #expect(try s.pinStatus(.pin) == PINStatus(kind: .pin, retriesLeft: 2, maxRetries: 3, isDefault: true))
    #expect(s.card.transmitCount == afterWrong)
    // A right PIN resets the counter on the card: what was remembered is dropped and read again.
    try s.verifyPIN(Array("123456".utf8))
    #expect(try s.pinStatus(.pin).retriesLeft == 3)
    #expect(s.card.transmitCount == afterWrong + 2)
    // Released: the next operation begins a new transaction with SELECT and reads the tries afresh.
    s.releaseCard()
    let beforeNew = s.card.transmitCount
    #expect(try s.pinStatus(.pin).retriesLeft == 3)
    #expect(s.card.transmitCount == beforeNew + 2)  // SELECT, GET METADATA
  }

  @Test func cardWithoutPIVIsNamed() throws {
    let card = try VirtualCard(arguments: ["--without-piv"])
    let result = try TokenDiscovery().discover()
    #expect(result.tokens.isEmpty)
    #expect(result.unusableCards.map(\.reader) == [card.reader])
    #expect(result.unusableCards.first?.reason == .notPIV(reader: card.reader))
  }
}

final class Flag: Sendable {
  private let raised = Atomic(false)
  var value: Bool { raised.load(ordering: .acquiring) }
  func set() { raised.store(true, ordering: .releasing) }
}

/// A value handed to another thread, which takes it: the sender gives it up (`sending`), so no two threads hold it.
final class Passed<T>: Sendable {
  private let slot: Mutex<T?>
  init(_ value: sending T) { slot = Mutex(value) }
  func take() -> T? { slot.withLock { $0.take() } }
}

extension PIVThroughPCSCDTests {
  /// The card's ATR announces extended Lc/Le: a 2000-byte object goes out in one APDU (no chaining). Reads keep a
  /// short Le and collect the answer with GET RESPONSE, which every card supports.
  @Test func largeObjectsUseExtendedLength() throws {
    let card = try VirtualCard()
    var lines: [String] = []
    let s = PIVSession(transport: try PCSCContext().connect(card.reader), trace: { lines.append($0) })
    #expect(s.card.useExtendedLength)
    let value = (0..<2000).map { UInt8($0 % 251) }
    try s.transact { () throws(TokenError) in
      try s.authenticateManagementKey(.defaultKey)
      try s.writeObject(0x5FC10A, value)
    }
    #expect(lines.filter { $0.hasPrefix("> 00 DB") || $0.hasPrefix("> 10 DB") }.count == 1)
    #expect(try s.readObject(0x5FC10A) == value)
    #expect(lines.contains { $0.hasPrefix("> 00 C0") })
  }

  /// After a session that verified the PIN is closed, no other program may use the verified state.
  @Test func closingAVerifiedSessionResetsTheCard() throws {
    let card = try VirtualCard(arguments: ["--firmware", "5.2.7"])  // no VERIFY P1=FF: state is visible
    do {
      let s = try card.open()
      try s.verifyPIN(Array("123456".utf8))
      #expect(try s.pinStatus(.pin).isVerified)
    }
    let other = try card.open()
    #expect(try other.pinStatus(.pin) == PINStatus(kind: .pin, retriesLeft: 3))
  }
}
