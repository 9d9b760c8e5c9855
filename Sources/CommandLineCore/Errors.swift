/// A command line that does not fit the command's spec: exit 64, this message, then the command's usage line.
public enum UsageError: Error, Equatable, Sendable {
  /// `--bogus`, or `-x`: no such option here.
  case unknownOption(String)
  /// A word no positional argument or subcommand takes.
  case unexpectedArgument(String)
  /// An option at the end of the line, or followed by another option (`--pin-fd --json`).
  case missingValue(argument: String)
  /// A value of the wrong type (`--pin-fd abc`), or one a transform refused (with its reason).
  case invalidValue(value: String, argument: String, reason: String?)
  /// A required option or positional argument not given.
  case missingArgument(String)
  /// `--json=1`.
  case valueForFlag(flag: String, value: String)
  /// `tokenbridge help bogus`.
  case unknownCommand(String)

  public var message: String {
    switch self {
    case .unknownOption(let o): "Unknown option '\(o)'"
    case .unexpectedArgument(let a): "Unexpected argument '\(a)'"
    case .missingValue(let a): "Missing value for '\(a)'"
    case .invalidValue(let v, let a, let reason):
      "The value '\(v)' is invalid for '\(a)'" + (reason.map { ": " + $0 } ?? "")
    case .missingArgument(let a): "Missing expected argument '\(a)'"
    case .valueForFlag(let f, let v): "The option '\(f)' does not take any value, but '\(v)' was specified."
    case .unknownCommand(let c): "Unknown command '\(c)'"
    }
  }
}

/// A command's own check of its values failed (`validate()`): exit 64, the message, then the usage line.
public struct ValidationError: Error, Equatable, Sendable {
  public let message: String
  public init(_ message: String) { self.message = message }
}

/// Thrown by a command to end with this exit status (nothing more is printed).
public struct ExitCode: Error, Equatable, Sendable {
  public let rawValue: Int32
  public init(_ code: Int32) { rawValue = code }
  public static let success = ExitCode(0)
  public static let failure = ExitCode(1)
  /// EX_USAGE: the status of every usage error.
  public static let usage = ExitCode(64)
}
