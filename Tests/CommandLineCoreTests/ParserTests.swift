import Testing

@testable import CommandLineCore

/// A small command tree shaped like tokenbridge's: a group with a leaf of options, a leaf with a positional
/// argument, a nested group with a default subcommand.
enum Sample {
  static let token = ArgumentSpec.option("token", help: "The token to use.")
  static let json = ArgumentSpec.flag("json", help: "Machine-readable output.")
  static let pinFd = ArgumentSpec.option("pin-fd", .int32, help: "Read PINs from this descriptor.")
  static let timeout = ArgumentSpec.option("timeout", .double, help: "Seconds to wait.")
  static let username = ArgumentSpec.option("username", required: true, help: "The username at the server.")
  static let server = ArgumentSpec.option("server", repeatable: true, help: "A server (several allowed).")
  static let keyID = ArgumentSpec.positional("key-id", help: "KeyID to forget.")
  static let link = ArgumentSpec.positional("link", required: false, help: "A link.")
  static let slot = ArgumentSpec.option("slot", help: "Key slot.")

  static let change = CommandSpec(
    name: "change", abstract: "Change the PIN.", discussion: "With --pin-fd N: the PIN on descriptor N.",
    arguments: [token, json, pinFd, timeout], run: { _ in })
  static let register = CommandSpec(
    name: "register", abstract: "Register a token.", arguments: [token, username, server], run: { _ in })
  static let delete = CommandSpec(
    name: "delete", abstract: "Forget a registration.", arguments: [json, keyID], run: { _ in })
  static let oob = CommandSpec(name: "oob", abstract: "Out-of-band.", arguments: [json, link, slot], run: { _ in })
  static let list = CommandSpec(name: "list", abstract: "List the credentials.", arguments: [json], run: { _ in })
  static let pin = CommandSpec(group: "pin", abstract: "PIN status, change and unblock.", subcommands: [change])
  static let credentials = CommandSpec(
    group: "credentials", abstract: "The credentials.", subcommands: [list, delete], defaultSubcommand: "list")
  static let root = CommandSpec(
    group: "tool", abstract: "A sample tool.", discussion: "First paragraph.\nSecond paragraph.",
    subcommands: [pin, register, oob, credentials, delete])
  static let program = Program(root: root, version: "1.2.3")

  /// The parsed values of a command line that runs a command, else nil.
  static func parsed(_ args: [String]) -> Parsed? {
    if case .run(_, let p) = program.parse(args) { return p }
    return nil
  }

  /// The usage error and the command it is in ("tool pin change"), else nil.
  static func usageError(_ args: [String]) -> (UsageError, String)? {
    if case .usageError(let e, let path) = program.parse(args) { return (e, Help.commandName(path)) }
    return nil
  }

  static func helpPath(_ args: [String]) -> String? {
    if case .help(let path) = program.parse(args) { return Help.commandName(path) }
    return nil
  }
}

@Suite struct ParserTests {
  @Test func optionWithSeparateValueAndWithEquals() throws {
    let a = try #require(Sample.parsed(["pin", "change", "--token", "piv-1", "--pin-fd", "3"]))
    #expect(a.command.name == "change")
    #expect(a.string(Sample.token) == "piv-1")
    #expect(a.int32(Sample.pinFd) == 3)
    let b = try #require(Sample.parsed(["pin", "change", "--token=piv-2", "--pin-fd=-1", "--timeout=2.5"]))
    #expect(b.string(Sample.token) == "piv-2")
    #expect(b.int32(Sample.pinFd) == -1)  // with "=", a value may start with "-"
    #expect(b.double(Sample.timeout) == 2.5)
    #expect(b.flag(Sample.json) == false)
    // "=" inside the value is kept.
    #expect(Sample.parsed(["pin", "change", "--token=a=b"])?.string(Sample.token) == "a=b")
  }

  @Test func flagsAndUnsetOptions() throws {
    let p = try #require(Sample.parsed(["pin", "change", "--json", "--json"]))
    #expect(p.flag(Sample.json))
    #expect(p.string(Sample.token) == nil)
    #expect(p.int32(Sample.pinFd) == nil)
  }

  @Test func aRepeatedOptionKeepsTheLastValueUnlessRepeatable() throws {
    let p = try #require(Sample.parsed(["register", "--username", "a", "--username", "b", "--token", "t"]))
    #expect(p.string(Sample.username) == "b")
    let q = try #require(Sample.parsed(["register", "--username", "u", "--server", "s1", "--server=s2"]))
    #expect(q.strings(Sample.server) == ["s1", "s2"])
    #expect(q.string(Sample.server) == "s2")
  }

  @Test func positionalArgumentsAndOptionsInterleave() throws {
    let p = try #require(Sample.parsed(["delete", "K1", "--json"]))
    #expect(p.string(Sample.keyID) == "K1")
    #expect(p.flag(Sample.json))
    let q = try #require(Sample.parsed(["oob", "--slot", "9a", "https://x"]))
    #expect(q.string(Sample.link) == "https://x")
    #expect(Sample.parsed(["oob"])?.string(Sample.link) == nil)  // optional positional
  }

  @Test func doubleDashEndsTheOptions() throws {
    let p = try #require(Sample.parsed(["oob", "--json", "--", "--not-an-option"]))
    #expect(p.string(Sample.link) == "--not-an-option")
    #expect(p.flag(Sample.json))
    let q = try #require(Sample.parsed(["delete", "--", "-K"]))
    #expect(q.string(Sample.keyID) == "-K")
    #expect(q.flag(Sample.json) == false)
    // After "--", --help is an argument, not a request for help.
    #expect(Sample.parsed(["delete", "--", "--help"])?.string(Sample.keyID) == "--help")
    // A second "--" is a positional argument.
    #expect(Sample.usageError(["delete", "--", "a", "--"])! == (.unexpectedArgument("--"), "tool delete"))
  }

  @Test func aLoneDashIsAValue() throws {
    #expect(Sample.parsed(["oob", "--slot", "-"])?.string(Sample.slot) == "-")
    #expect(Sample.parsed(["oob", "-"])?.string(Sample.link) == "-")
  }

  @Test func unknownOption() {
    #expect(Sample.usageError(["pin", "change", "--bogus"])! == (.unknownOption("--bogus"), "tool pin change"))
    #expect(Sample.usageError(["pin", "change", "--bogus=1"])! == (.unknownOption("--bogus"), "tool pin change"))
    #expect(Sample.usageError(["pin", "change", "-x"])! == (.unknownOption("-x"), "tool pin change"))
    // Unknown option after a positional argument.
    #expect(Sample.usageError(["delete", "K1", "--bogus"])! == (.unknownOption("--bogus"), "tool delete"))
    // Options of a leaf are not options of its group.
    #expect(Sample.usageError(["pin", "--json", "change"])! == (.unknownOption("--json"), "tool pin"))
    #expect(Sample.usageError(["--json", "pin"])! == (.unknownOption("--json"), "tool"))
  }

  @Test func unknownCommandAndUnexpectedArgument() {
    #expect(Sample.usageError(["bogus"])! == (.unexpectedArgument("bogus"), "tool"))
    #expect(Sample.usageError(["pin", "bogus"])! == (.unexpectedArgument("bogus"), "tool pin"))
    #expect(Sample.usageError(["pin", "change", "extra"])! == (.unexpectedArgument("extra"), "tool pin change"))
    #expect(Sample.usageError(["delete", "a", "b"])! == (.unexpectedArgument("b"), "tool delete"))
    #expect(Sample.usageError(["help", "pin", "bogus"])! == (.unknownCommand("bogus"), "tool pin"))
  }

  @Test func missingValue() {
    #expect(
      Sample.usageError(["pin", "change", "--pin-fd"])!
        == (.missingValue(argument: "--pin-fd <pin-fd>"), "tool pin change"))
    // A following option, or a negative number, is not taken as the value (use --pin-fd=-1).
    #expect(
      Sample.usageError(["pin", "change", "--token", "--json"])!
        == (.missingValue(argument: "--token <token>"), "tool pin change"))
    #expect(
      Sample.usageError(["pin", "change", "--pin-fd", "-1"])!
        == (.missingValue(argument: "--pin-fd <pin-fd>"), "tool pin change"))
    #expect(
      Sample.usageError(["pin", "change", "--token="])!
        == (.missingValue(argument: "--token <token>"), "tool pin change"))
  }

  @Test func valueOfTheWrongType() {
    #expect(
      Sample.usageError(["pin", "change", "--pin-fd", "abc"])!
        == (.invalidValue(value: "abc", argument: "--pin-fd <pin-fd>", reason: nil), "tool pin change"))
    #expect(
      Sample.usageError(["pin", "change", "--pin-fd=99999999999"])!
        == (.invalidValue(value: "99999999999", argument: "--pin-fd <pin-fd>", reason: nil), "tool pin change"))
    #expect(
      Sample.usageError(["pin", "change", "--timeout", "soon"])!
        == (.invalidValue(value: "soon", argument: "--timeout <timeout>", reason: nil), "tool pin change"))
  }

  @Test func aFlagTakesNoValue() {
    #expect(
      Sample.usageError(["pin", "change", "--json=1"])!
        == (.valueForFlag(flag: "--json", value: "1"), "tool pin change"))
  }

  @Test func missingRequiredOptionAndPositional() {
    #expect(
      Sample.usageError(["register"])! == (.missingArgument("--username <username>"), "tool register"))
    #expect(Sample.usageError(["delete", "--json"])! == (.missingArgument("<key-id>"), "tool delete"))
  }

  @Test func transformRefusalIsAUsageErrorNamingTheOption() throws {
    let p = try #require(Sample.parsed(["oob", "--slot", "zz"]))
    #expect(throws: UsageError.invalidValue(value: "zz", argument: "--slot <slot>", reason: "not a slot")) {
      _ = try p.value(Sample.slot) { s -> Int in
        guard s == "9a" else { throw ValidationError("not a slot") }
        return 0x9a
      }
    }
    let q = try #require(Sample.parsed(["oob", "--slot", "9a"]))
    #expect(try q.value(Sample.slot) { _ in 0x9a } == 0x9a)
  }

  @Test func messages() {
    #expect(UsageError.unknownOption("--bogus").message == "Unknown option '--bogus'")
    #expect(UsageError.unexpectedArgument("x").message == "Unexpected argument 'x'")
    #expect(UsageError.missingValue(argument: "--pin-fd <pin-fd>").message == "Missing value for '--pin-fd <pin-fd>'")
    #expect(
      UsageError.invalidValue(value: "abc", argument: "--pin-fd <pin-fd>", reason: nil).message
        == "The value 'abc' is invalid for '--pin-fd <pin-fd>'")
    #expect(
      UsageError.invalidValue(value: "zz", argument: "--slot <slot>", reason: "'zz' is not a PIV key slot").message
        == "The value 'zz' is invalid for '--slot <slot>': 'zz' is not a PIV key slot")
    #expect(
      UsageError.missingArgument("--username <username>").message
        == "Missing expected argument '--username <username>'")
    #expect(
      UsageError.valueForFlag(flag: "--json", value: "1").message
        == "The option '--json' does not take any value, but '1' was specified.")
    #expect(UsageError.unknownCommand("bogus").message == "Unknown command 'bogus'")
  }

  @Test func usageErrorText() {
    let path = [Sample.root, Sample.pin, Sample.change]
    #expect(
      Help.usageError("Unknown option '--bogus'", path)
        == "Error: Unknown option '--bogus'\n"
        + "Usage: tool pin change [--token <token>] [--json] [--pin-fd <pin-fd>] [--timeout <timeout>]\n"
        + "  See 'tool pin change --help' for more information.\n")
  }
}

@Suite struct HelpAndVersionTests {
  @Test func helpAtEveryLevel() {
    #expect(Sample.helpPath(["--help"]) == "tool")
    #expect(Sample.helpPath(["-h"]) == "tool")
    #expect(Sample.helpPath(["pin", "-h"]) == "tool pin")
    #expect(Sample.helpPath(["pin", "change", "--help"]) == "tool pin change")
    #expect(Sample.helpPath(["pin", "change", "--token", "x", "-help"]) == "tool pin change")
    // Help wins over a usage error in the same line.
    #expect(Sample.helpPath(["pin", "change", "--bogus", "--help"]) == "tool pin change")
    #expect(Sample.helpPath(["credentials", "--help"]) == "tool credentials")
  }

  @Test func helpCommand() {
    #expect(Sample.helpPath(["help"]) == "tool")
    #expect(Sample.helpPath(["help", "pin"]) == "tool pin")
    #expect(Sample.helpPath(["help", "pin", "change"]) == "tool pin change")
    #expect(Sample.helpPath(["help", "pin", "--help"]) == "tool pin")
  }

  @Test func aGroupWithoutSubcommandShowsItsHelp() {
    #expect(Sample.helpPath([]) == "tool")
    #expect(Sample.helpPath(["pin"]) == "tool pin")
  }

  @Test func aGroupWithADefaultSubcommandRunsIt() throws {
    #expect(Sample.parsed(["credentials"])?.command.name == "list")
    let p = try #require(Sample.parsed(["credentials", "--json"]))
    #expect(p.command.name == "list" && p.flag(Sample.json))
    #expect(Sample.parsed(["credentials", "delete", "K"])?.string(Sample.keyID) == "K")
    #expect(Sample.usageError(["credentials", "--bogus"])! == (.unknownOption("--bogus"), "tool credentials list"))
  }

  @Test func version() {
    guard case .version = Sample.program.parse(["--version"]) else {
      Issue.record("--version at the root")
      return
    }
    guard case .version = Sample.program.parse(["pin", "change", "--json", "--version"]) else {
      Issue.record("--version in a command")
      return
    }
    guard case .version = Sample.program.parse(["pin", "--version"]) else {
      Issue.record("--version in a group")
      return
    }
  }

  @Test func helpText() {
    let root = Help.text([Sample.root], version: "1.2.3")
    #expect(
      root.hasPrefix("OVERVIEW: A sample tool.\n\nFirst paragraph.\nSecond paragraph.\n\nUSAGE: tool <subcommand>\n"))
    #expect(root.contains("SUBCOMMANDS:\n  pin                     PIN status, change and unblock.\n"))
    #expect(root.contains("  register                Register a token.\n"))
    #expect(root.contains("  See 'tool help <subcommand>' for detailed help.\n"))
    #expect(root.contains("  --version               Show the version.\n"))
    #expect(root.contains("  -h, --help              Show help information.\n"))

    let change = Help.text([Sample.root, Sample.pin, Sample.change], version: "1.2.3")
    #expect(change.hasPrefix("OVERVIEW: Change the PIN.\n\nWith --pin-fd N: the PIN on descriptor N.\n\n"))
    // The usage line wraps between arguments, never inside one.
    #expect(
      change.contains(
        "USAGE: tool pin change [--token <token>] [--json] [--pin-fd <pin-fd>]\n       [--timeout <timeout>]\n"))
    #expect(
      change.contains(
        "OPTIONS:\n  --token <token>         The token to use.\n  --json                  Machine-readable"))
    #expect(change.contains("  --pin-fd <pin-fd>       Read PINs from this descriptor.\n"))
    #expect(!change.contains("SUBCOMMANDS"))

    let delete = Help.text([Sample.root, Sample.delete], version: nil)
    #expect(delete.contains("USAGE: tool delete [--json] <key-id>\n"))
    #expect(delete.contains("ARGUMENTS:\n  <key-id>                KeyID to forget.\n"))
    #expect(!delete.contains("--version"))

    let register = Help.text([Sample.root, Sample.register], version: nil)
    #expect(
      register.contains(
        "USAGE: tool register [--token <token>] --username <username>\n       [--server <server> ...]\n"))

    let credentials = Help.text([Sample.root, Sample.credentials], version: nil)
    #expect(credentials.contains("  list (default)          List the credentials.\n"))
    #expect(credentials.contains("  See 'tool help credentials <subcommand>' for detailed help.\n"))
  }

  @Test func wrapsAt80ColumnsInTheDescriptionColumn() {
    let long = String(repeating: "word ", count: 30) + "end."
    let s = Help.entry("--a-very-long-option-name <a-very-long-option-name>", long)
    let lines = s.split(separator: "\n")
    #expect(lines[0] == "  --a-very-long-option-name <a-very-long-option-name>")
    for l in lines.dropFirst() {
      #expect(l.count <= 80)
      #expect(l.hasPrefix(String(repeating: " ", count: 26)) && !l.hasPrefix(String(repeating: " ", count: 27)))
    }
    #expect(lines.last!.hasSuffix("end."))
  }
}

@Suite struct RunTests {
  final class Box: @unchecked Sendable { var value: [String] = [] }

  @Test func exitStatuses() {
    let seen = Box()
    let ok = CommandSpec(
      name: "ok", abstract: "", arguments: [Sample.token],
      run: { p in
        seen.value.append(p.string(Sample.token) ?? "-")
      })
    let fails = CommandSpec(name: "fails", abstract: "", run: { _ in throw ExitCode(7) })
    let invalid = CommandSpec(name: "invalid", abstract: "", run: { _ in throw ValidationError("give --x") })
    struct Other: Error {}
    let other = CommandSpec(name: "other", abstract: "", run: { _ in throw Other() })
    let program = Program(
      root: CommandSpec(group: "t", abstract: "", subcommands: [ok, fails, invalid, other]), version: "1")
    let report: (any Error) -> Int32 = { _ in 42 }
    #expect(program.run(["ok", "--token", "x"], report: report) == 0)
    #expect(seen.value == ["x"])
    #expect(program.run(["fails"], report: report) == 7)
    #expect(program.run(["invalid"], report: report) == 64)
    #expect(program.run(["other"], report: report) == 42)
    #expect(program.run(["ok", "--bogus"], report: report) == 64)
    #expect(program.run(["ok", "--help"], report: report) == 0)
    #expect(program.run(["--version"], report: report) == 0)
    #expect(seen.value == ["x"])  // neither a usage error nor help ran the command
  }
}
