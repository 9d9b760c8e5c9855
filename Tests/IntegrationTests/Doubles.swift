import TokenBridge
import TokenDevices

/// Scripted answers for the library's interaction protocols (our own protocols, not a real part).
final class ScriptedChanger: PinChanger {
  var answers: [(String, String)]
  var confirmLast: Bool
  var contexts: [PinChangeContext] = []
  var confirmations = 0

  init(_ answers: [(String, String)], confirmLast: Bool = false) {
    self.answers = answers
    self.confirmLast = confirmLast
  }

  func providePins(_ context: PinChangeContext) throws -> PinChangeAnswer {
    contexts.append(context)
    guard !answers.isEmpty else { throw InteractionError.cancelled }
    let (current, new) = answers.removeFirst()
    return PinChangeAnswer(current: Secret(Array(current.utf8)), new: Secret(Array(new.utf8)))
  }

  func confirmLastAttempt(_ context: PinChangeContext) throws -> Bool {
    confirmations += 1
    return confirmLast
  }
}

final class ScriptedVerifier: PinUserVerifier {
  var pins: [String]
  var contexts: [PinVerificationContext] = []
  init(_ pins: [String]) { self.pins = pins }

  func providePin(_ context: PinVerificationContext) throws -> Secret {
    contexts.append(context)
    guard !pins.isEmpty else { throw InteractionError.cancelled }
    return Secret(Array(pins.removeFirst().utf8))
  }

  func confirmLastAttempt(_ context: PinVerificationContext) throws -> Bool { false }
}
