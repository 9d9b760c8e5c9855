#if canImport(Glibc)
  import Glibc
#endif

/// A program: its root command (a group), its version, and how it reports a command's unexpected error.
public struct Program: Sendable {
  public let root: CommandSpec
  public let version: String

  public init(root: CommandSpec, version: String) {
    self.root = root
    self.version = version
  }

  /// What a command line asks for.
  public enum Outcome {
    /// Run `command` (the last of `path`) with its values.
    case run(path: [CommandSpec], Parsed)
    /// Print the help of the last command of `path` (`-h`, `--help`, `help …`, a group without subcommand).
    case help(path: [CommandSpec])
    case version
    /// A usage error in the last command of `path`.
    case usageError(UsageError, path: [CommandSpec])
  }

  /// Resolves the command path (subcommand names), then parses the last command's words.
  /// `-h`/`--help`/`-help` anywhere before `--` shows that command's help; `--version` prints the version.
  public func parse(_ args: [String]) -> Outcome {
    var path = [root]
    var rest = args[...]
    if root.subcommand(named: "help") == nil, rest.first == "help" {
      rest = rest.dropFirst()
      for word in rest where !Parser.looksLikeOption(word) {  // `help pin --help` is `help pin`
        guard let next = path[path.count - 1].subcommand(named: word) else {
          return .usageError(.unknownCommand(word), path: path)
        }
        path.append(next)
      }
      return .help(path: path)
    }
    while path[path.count - 1].run == nil {
      let group = path[path.count - 1]
      if let word = rest.first, let next = group.subcommand(named: word) {
        path.append(next)
        rest = rest.dropFirst()
        continue
      }
      if let word = rest.first, Parser.isHelp(word) { return .help(path: path) }
      if rest.first == "--version" { return .version }
      if let d = group.defaultSubcommand, let next = group.subcommand(named: d) {
        path.append(next)
        continue
      }
      guard let word = rest.first else { return .help(path: path) }
      return .usageError(
        Parser.looksLikeOption(word) ? .unknownOption(word) : .unexpectedArgument(word), path: path)
    }
    let command = path[path.count - 1]
    for word in rest {
      if word == "--" { break }
      if Parser.isHelp(word) { return .help(path: path) }
    }
    for word in rest {
      if word == "--" { break }
      if word == "--version" && command.argument(named: "version") == nil { return .version }
    }
    do {
      return .run(path: path, try Parser.parse(Array(rest), for: command))
    } catch {
      return .usageError(error, path: path)
    }
  }

  /// Runs the command line and returns the exit status: 0, a command's `ExitCode`, 64 for a usage or validation
  /// error (message, usage line, where to find help, on stderr), else what `report` makes of the error (it
  /// prints it).
  public func run(_ args: [String], report: (any Error) -> Int32) -> Int32 {
    switch parse(args) {
    case .version:
      Output.out(version + "\n")
      return 0
    case .help(let path):
      Output.out(Help.text(path, version: version))
      return 0
    case .usageError(let e, let path):
      Output.err(Help.usageError(e.message, path))
      return ExitCode.usage.rawValue
    case .run(let path, let parsed):
      do {
        try path[path.count - 1].run!(parsed)
        return 0
      } catch let e as ExitCode {
        return e.rawValue
      } catch let e as ValidationError {
        Output.err(Help.usageError(e.message, path))
        return ExitCode.usage.rawValue
      } catch let e as UsageError {
        Output.err(Help.usageError(e.message, path))
        return ExitCode.usage.rawValue
      } catch {
        return report(error)
      }
    }
  }

  /// `run`, then exit with its status (stdio flushed).
  public func main(_ args: [String], report: (any Error) -> Int32) -> Never {
    let status = run(args, report: report)
    fflush(nil)
    _exit(status)
  }
}

/// Writes straight to the descriptors (after flushing stdio's buffers, which commands' `print` fills).
enum Output {
  static func out(_ s: String) { write(1, s) }
  static func err(_ s: String) { write(2, s) }

  static func write(_ fd: Int32, _ s: String) {
    fflush(nil)
    var bytes = Array(s.utf8)
    bytes.withUnsafeMutableBytes { buf in
      var done = 0
      while done < buf.count {
        let n = Glibc.write(fd, buf.baseAddress! + done, buf.count - done)
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return }
        done += n
      }
    }
  }
}
