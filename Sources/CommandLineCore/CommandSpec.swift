/// A declarative, non-reflective command-line parser (issue 12): every command states its arguments in a static
/// spec, the parser fills a `Parsed` from argv, and the command builds itself from it. No Mirror, no Codable, no
/// casts to protocols and no hashed collections on the parse path: each is a first-time protocol-conformance
/// lookup in the Swift runtime, a linear scan of the binary's conformance records.

/// The type of an option's value, checked while parsing (a wrong value is a usage error, exit 64).
public enum ValueType: Sendable, Equatable {
  case string
  /// A decimal Int32 (a file descriptor).
  case int32
  /// A finite or infinite decimal number, as Double(String) reads it.
  case double
}

/// One argument of a command: a flag (`--json`), an option with a value (`--token ID`, `--token=ID`), or a
/// positional argument (`<key-id>`).
public struct ArgumentSpec: Sendable {
  public enum Kind: Sendable, Equatable {
    case flag
    case option(ValueType)
    case positional
  }

  /// The long name without "--" (`pin-fd`), or a positional argument's name (`key-id`).
  public let name: String
  public let kind: Kind
  /// The value's name in usage and help (`<pin-fd>`); the name unless given.
  public let valueName: String
  public let help: String
  /// A required option or positional argument: missing, it is a usage error.
  public let isRequired: Bool
  /// An option that may be given several times, each value kept (`strings(_:)`); otherwise the last one counts.
  public let isRepeatable: Bool

  public static func flag(_ name: String, help: String) -> ArgumentSpec {
    ArgumentSpec(name: name, kind: .flag, valueName: name, help: help, isRequired: false, isRepeatable: false)
  }

  public static func option(
    _ name: String, _ type: ValueType = .string, valueName: String? = nil, required: Bool = false,
    repeatable: Bool = false, help: String
  ) -> ArgumentSpec {
    ArgumentSpec(
      name: name, kind: .option(type), valueName: valueName ?? name, help: help, isRequired: required,
      isRepeatable: repeatable)
  }

  public static func positional(_ name: String, required: Bool = true, help: String) -> ArgumentSpec {
    ArgumentSpec(name: name, kind: .positional, valueName: name, help: help, isRequired: required, isRepeatable: false)
  }

  /// How usage lines and messages name it: `--pin-fd <pin-fd>`, `--json`, `<key-id>`.
  public var display: String {
    switch kind {
    case .flag: "--" + name
    case .option: "--" + name + " <" + valueName + ">"
    case .positional: "<" + valueName + ">"
    }
  }

  var isPositional: Bool { kind == .positional }
}

/// A command: its name, help, arguments, and either subcommands (a group) or what it runs.
public struct CommandSpec: Sendable {
  public let name: String
  public let abstract: String
  public let discussion: String
  public let arguments: [ArgumentSpec]
  public let subcommands: [CommandSpec]
  /// The subcommand that runs when a group is given none (or only options).
  public let defaultSubcommand: String?
  /// Builds the command from its parsed values, validates it and runs it. Nil for a group.
  public let run: (@Sendable (Parsed) throws -> Void)?

  public init(
    name: String, abstract: String, discussion: String = "", arguments: [ArgumentSpec] = [],
    run: @escaping @Sendable (Parsed) throws -> Void
  ) {
    self.name = name
    self.abstract = abstract
    self.discussion = discussion
    self.arguments = arguments
    self.subcommands = []
    self.defaultSubcommand = nil
    self.run = run
  }

  /// A group: run without a subcommand it prints its help (or runs `defaultSubcommand`).
  public init(
    group name: String, abstract: String, discussion: String = "", subcommands: [CommandSpec],
    defaultSubcommand: String? = nil
  ) {
    self.name = name
    self.abstract = abstract
    self.discussion = discussion
    self.arguments = []
    self.subcommands = subcommands
    self.defaultSubcommand = defaultSubcommand
    self.run = nil
  }

  public func subcommand(named n: String) -> CommandSpec? {
    for s in subcommands where s.name == n { return s }
    return nil
  }

  func argument(named n: String) -> Int? {
    for (i, a) in arguments.enumerated() where !a.isPositional && a.name == n { return i }
    return nil
  }
}
