import Testing
import UAFCore

@testable import TokenBridge
@testable import TokenDevices

/// The one PIN-attempt engine, driven by a scripted token state (the engine is our own logic; the real
/// tokens are exercised through pcscd and libfido2 in the integration and CLI tests).
@Suite struct PinAttemptsTests {
  let info = TokenInfo(
    id: "piv-1", kind: .piv, name: "PIV card", reader: nil, capabilities: ["piv"], serial: 1, version: nil,
    pin: nil, puk: nil, fido2: nil)

  /// A token with `tries` left and a right PIN; counts what was sent.
  final class FakeToken {
    var tries: Int
    var reads = 0
    var sent: [String] = []
    let right: String
    var coolDownAfter: Int?
    /// The token says with its tries that it is in a cool-down (until `reinserted`).
    var coolingDown = false
    init(tries: Int, right: String = "123456") {
      self.tries = tries
      self.right = right
    }
    func status() -> PINStatus {
      reads += 1
      return PINStatus(kind: .pin, retriesLeft: tries, maxRetries: 3)
    }
    func attempt(_ pin: [UInt8]) throws(TokenError) -> String? {
      let s = String(decoding: pin, as: UTF8.self)
      sent.append(s)
      if let n = coolDownAfter, sent.count == n { throw .needsReinsertion }
      if s == right { return "ok" }
      tries -= 1
      if tries == 0 { throw .pinBlocked(.pin) }
      throw .wrongPIN(.pin, retriesLeft: tries)
    }
  }

  func run(
    _ token: FakeToken, answers: [String], confirm: Bool = false, known: PINStatus? = nil,
    coolDown: (() throws(OperationError) -> Void)? = nil, coolingDown: (() -> Bool)? = nil,
    rounds: inout [PinAttempts.Round]
  ) throws(OperationError) -> String {
    var answers = answers
    var seen: [PinAttempts.Round] = []
    defer { rounds = seen }
    let engine = PinAttempts(
      token: info, kind: .pin, known: known, readStatus: { () throws(TokenError) in token.status() },
      waitForReinsertion: coolDown, coolingDown: coolingDown)
    return try engine.run(
      ask: { round in
        seen.append(round)
        guard !answers.isEmpty else { throw InputError.noMoreInput(expected: .pin) }
        return Secret(Array(answers.removeFirst().utf8))
      },
      check: { pin in TokenFormat.pivReferenceData.validate(new: pin.bytes).map { .invalidCurrent(.pin, $0) } },
      confirmLast: { _ in confirm },
      attempt: { (pin, _) throws(TokenError) -> String? in try token.attempt(pin.bytes) })
  }

  @Test func readsTheTriesFirstThenVerifies() throws {
    let t = FakeToken(tries: 3)
    var rounds: [PinAttempts.Round] = []
    #expect(try run(t, answers: ["123456"], rounds: &rounds) == "ok")
    #expect(t.reads == 1 && t.sent == ["123456"])
    #expect(rounds.first?.protection == .unlocked(retriesLeft: 3))
  }

  @Test func aValueTheFormatRefusesCostsNoTry() throws {
    let t = FakeToken(tries: 3)
    var rounds: [PinAttempts.Round] = []
    #expect(try run(t, answers: ["12345", "123456789", "", "123456"], rounds: &rounds) == "ok")
    #expect(t.sent == ["123456"] && t.tries == 3)
    #expect(
      rounds.map(\.lastError) == [
        nil, .invalidCurrent(.pin, .tooShort(minimum: 6)), .invalidCurrent(.pin, .tooLong(maximum: 8)),
        .invalidCurrent(.pin, .empty),
      ])
  }

  @Test func wrongPINIsRecoverableAndShowsTheTriesLeft() throws {
    let t = FakeToken(tries: 3)
    var rounds: [PinAttempts.Round] = []
    #expect(try run(t, answers: ["000000", "123456"], rounds: &rounds) == "ok")
    #expect(rounds[1].lastError == .wrong(.pin, retriesLeft: 2))
    #expect(rounds[1].protection == .lastAttemptFailed(retriesLeft: 2, coolDownSeconds: 0))
  }

  @Test func theLastTryNeedsAnExplicitYes() {
    let t = FakeToken(tries: 1)
    var rounds: [PinAttempts.Round] = []
    #expect(throws: OperationError.cancelled) { _ = try run(t, answers: ["123456"], confirm: false, rounds: &rounds) }
    #expect(t.sent.isEmpty)
  }

  @Test func aBlockedPINIsNeverAsked() {
    let t = FakeToken(tries: 0)
    var rounds: [PinAttempts.Round] = []
    #expect(throws: OperationError.blocked(.pin, token: info)) { _ = try run(t, answers: ["123456"], rounds: &rounds) }
    #expect(rounds.isEmpty && t.sent.isEmpty)
  }

  @Test func wrongUntilBlockedEndsBlocked() {
    let t = FakeToken(tries: 2)
    var rounds: [PinAttempts.Round] = []
    #expect(throws: OperationError.blocked(.pin, token: info)) {
      _ = try run(t, answers: ["000000", "000000"], confirm: true, rounds: &rounds)
    }
    #expect(t.sent.count == 2)
  }

  /// A script whose value was refused ends with the reason (exit 9 / 6), not "no more input".
  @Test func inputRunningDryEndsWithTheLastRefusal() {
    let t = FakeToken(tries: 3)
    var rounds: [PinAttempts.Round] = []
    #expect(throws: OperationError.pinRefused(.invalidCurrent(.pin, .tooLong(maximum: 8)), token: info)) {
      _ = try run(t, answers: ["123456789"], rounds: &rounds)
    }
    #expect(throws: OperationError.pinRefused(.wrong(.pin, retriesLeft: 2), token: info)) {
      _ = try run(t, answers: ["000000"], rounds: &rounds)
    }
    #expect(throws: OperationError.input(.noMoreInput(expected: .pin))) { _ = try run(t, answers: [], rounds: &rounds) }
    #expect(
      ErrorReport(OperationError.pinRefused(.invalidCurrent(.pin, .tooLong(maximum: 8)), token: info)).status
        == .policyViolation)
  }

  @Test func coolDownSendsNothingUntilReinserted() throws {
    let t = FakeToken(tries: 8)
    t.coolDownAfter = 1
    var waited = 0
    var rounds: [PinAttempts.Round] = []
    let r = try run(
      t, answers: ["123456", "123456"], coolDown: { () throws(OperationError) in waited += 1 }, rounds: &rounds)
    #expect(r == "ok" && waited == 1 && t.sent.count == 2)
    #expect(throws: OperationError.token(.needsReinsertion)) {
      let u = FakeToken(tries: 8)
      u.coolDownAfter = 1
      _ = try run(u, answers: ["123456"], rounds: &rounds)
    }
  }

  @Test func aCoolDownTheTokenReportsIsWaitedOutBeforeAnyPINIsAsked() throws {
    let t = FakeToken(tries: 5)
    t.coolingDown = true
    var waited = 0
    var rounds: [PinAttempts.Round] = []
    let r = try run(
      t, answers: ["123456"], known: PINStatus(kind: .pin, retriesLeft: 5),
      coolDown: { () throws(OperationError) in
        #expect(t.sent.isEmpty)  // nothing sent before the re-insert
        waited += 1
        t.coolingDown = false
      }, coolingDown: { t.coolingDown }, rounds: &rounds)
    #expect(r == "ok" && waited == 1 && t.sent == ["123456"] && rounds.count == 1)
    #expect(t.reads == 1)  // the tries were read again after the re-insert
    let u = FakeToken(tries: 5)
    u.coolingDown = true
    #expect(throws: OperationError.token(.needsReinsertion)) {
      _ = try run(u, answers: ["123456"], coolingDown: { u.coolingDown }, rounds: &rounds)
    }
    #expect(u.sent.isEmpty && rounds.isEmpty)  // without a way to wait: ends before asking, nothing sent
  }
}
