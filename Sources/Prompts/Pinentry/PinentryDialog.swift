import FoundationEssentials
import Synchronization

/// What one pinentry dialog shows. Texts are ours; anything from a token or server is made `displayable` first.
public struct PinentryDialog: Sendable, Equatable {
  public var title: String
  /// Several lines: the token, the tries left, the protection status.
  public var description: String
  public var prompt: String
  /// Why the previous answer was not taken (SETERROR).
  public var error: String?
  /// A new secret: asked twice (SETREPEAT; with a pinentry that refuses it, a second GETPIN compared here).
  public var repeatPrompt: String?
  /// Shown when the two entries differ.
  public var repeatError: String
  /// A short hint about the rules of a new secret (OPTION constraints-hint-short), when the program takes it.
  public var constraintsHint: String?

  public init(
    title: String, description: String, prompt: String, error: String? = nil, repeatPrompt: String? = nil,
    repeatError: String = "The two entries differ.", constraintsHint: String? = nil
  ) {
    self.title = title
    self.description = description
    self.prompt = prompt
    self.error = error
    self.repeatPrompt = repeatPrompt
    self.repeatError = repeatError
    self.constraintsHint = constraintsHint
  }
}

/// Ctrl-C while a pinentry dialog is up (set from the SIGINT handler's thread, read by the dialog's). The program
/// usually got the same Ctrl-C (a terminal pinentry shares our terminal) and ends its dialog as cancelled: it is
/// given `grace` for that; one that does not (it stopped reading, or never saw the signal) is then stopped and the
/// dialog ends as the user's cancel.
public final class PinentryCancellation: Sendable {
  let requested = Mutex<ContinuousClock.Instant?>(nil)
  static let grace: Duration = .seconds(1)

  public init() {}

  public func request() { requested.withLock { $0 = $0 ?? .now } }

  /// Ends the dialog at once, without the grace (the program is stopped): `tokenbridge serve`'s Close, a caller
  /// that left the bus. A dialog not started yet is not started.
  public func requestNow() { requested.withLock { $0 = .now - Self.grace } }

  /// Past the grace after a request: the dialog is to end now.
  var isDue: Bool { requested.withLock { $0.map { ContinuousClock.now >= $0 + Self.grace } ?? false } }
}
