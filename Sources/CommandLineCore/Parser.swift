/// Parses one command's own words (after its name) against its arguments.
///
/// `--name value` and `--name=value`; a flag takes no value; `--` ends the options (every later word is a
/// positional argument); options and positional arguments may interleave. A word that starts with "-" (other
/// than "-" alone) is never taken as a value or a positional argument: `--run=-id` gives such a value.
/// An option given twice keeps the last value, unless it is repeatable (every value kept).
public enum Parser {
  public static func parse(_ words: [String], for command: CommandSpec) throws(UsageError) -> Parsed {
    var parsed = Parsed(command: command)
    var positionals: [Int] = []
    for (i, a) in command.arguments.enumerated() where a.isPositional { positionals.append(i) }
    var nextPositional = 0
    var optionsEnded = false
    var i = 0
    while i < words.count {
      let word = words[i]
      i += 1
      if !optionsEnded && word == "--" {
        optionsEnded = true
        continue
      }
      if !optionsEnded && word.hasPrefix("--") {
        let body = word.dropFirst(2)
        let name: Substring
        var inline: String?
        if let eq = body.firstIndex(of: "=") {
          name = body[..<eq]
          inline = String(body[body.index(after: eq)...])
        } else {
          name = body
        }
        guard let k = command.argument(named: String(name)) else { throw .unknownOption("--" + name) }
        let a = command.arguments[k]
        guard case .option(let type) = a.kind else {
          if let inline { throw .valueForFlag(flag: "--" + name, value: inline) }
          parsed.values[k].append("")
          continue
        }
        let value: String
        if let inline {
          guard !inline.isEmpty else { throw .missingValue(argument: a.display) }  // `--name=`
          value = inline
        } else {
          guard i < words.count, !looksLikeOption(words[i]) else { throw .missingValue(argument: a.display) }
          value = words[i]
          i += 1
        }
        guard fits(value, type) else { throw .invalidValue(value: value, argument: a.display, reason: nil) }
        if a.isRepeatable {
          parsed.values[k].append(value)
        } else {
          parsed.values[k] = [value]
        }
        continue
      }
      if !optionsEnded && looksLikeOption(word) { throw .unknownOption(word) }
      guard nextPositional < positionals.count else { throw .unexpectedArgument(word) }
      parsed.values[positionals[nextPositional]] = [word]
      nextPositional += 1
    }
    for (k, a) in command.arguments.enumerated() where a.isRequired && parsed.values[k].isEmpty {
      throw .missingArgument(a.display)
    }
    return parsed
  }

  /// "-x", "--x", "-1": an option's spelling, never a value. "-" alone (stdin) is a value.
  static func looksLikeOption(_ word: String) -> Bool {
    word.utf8.count > 1 && word.utf8.first == UInt8(ascii: "-")
  }

  static func fits(_ value: String, _ type: ValueType) -> Bool {
    switch type {
    case .string: true
    case .int32: Int32(value) != nil
    case .double: Double(value) != nil
    }
  }

  static func isHelp(_ word: String) -> Bool { word == "--help" || word == "-h" || word == "-help" }
}
