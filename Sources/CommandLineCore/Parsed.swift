/// The values of one command's arguments after parsing, read by the command's `init(_ p: Parsed)` with the same
/// `ArgumentSpec` values its spec lists (so a name cannot be misspelt between the two).
public struct Parsed: Sendable {
  public let command: CommandSpec
  /// Per argument of `command.arguments`, in order: each value given (a flag: one "" per time it was given).
  var values: [[String]]

  init(command: CommandSpec) {
    self.command = command
    values = Array(repeating: [], count: command.arguments.count)
  }

  private func index(_ a: ArgumentSpec) -> Int {
    for (i, b) in command.arguments.enumerated() where b.name == a.name && b.isPositional == a.isPositional {
      return i
    }
    preconditionFailure("'\(a.name)' is not an argument of '\(command.name)'")
  }

  /// Every value given for `a`, in order.
  public func strings(_ a: ArgumentSpec) -> [String] { values[index(a)] }

  /// Whether the flag was given.
  public func flag(_ a: ArgumentSpec) -> Bool { !values[index(a)].isEmpty }

  /// The option's (last) value, or the positional argument.
  public func string(_ a: ArgumentSpec) -> String? { values[index(a)].last }

  /// A `.int32` option's value (checked while parsing).
  public func int32(_ a: ArgumentSpec) -> Int32? { string(a).flatMap { Int32($0) } }

  /// A `.double` option's value (checked while parsing).
  public func double(_ a: ArgumentSpec) -> Double? { string(a).flatMap { Double($0) } }

  /// The value converted by `transform`; a `ValidationError` it throws becomes a usage error naming the value and
  /// the option ("The value 'zz' is invalid for '--slot <slot>': …").
  public func value<T>(_ a: ArgumentSpec, _ transform: (String) throws -> T) throws -> T? {
    guard let s = string(a) else { return nil }
    do {
      return try transform(s)
    } catch let e as ValidationError {
      throw UsageError.invalidValue(value: s, argument: a.display, reason: e.message)
    }
  }
}
