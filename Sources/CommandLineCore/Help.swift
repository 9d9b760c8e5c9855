/// Help and usage text: OVERVIEW (abstract), the discussion, USAGE, ARGUMENTS, OPTIONS, SUBCOMMANDS, wrapped at
/// 80 columns with the descriptions in one column.
public enum Help {
  static let width = 80
  static let column = 26

  /// "tokenbridge pin change".
  public static func commandName(_ path: [CommandSpec]) -> String {
    var s = ""
    for c in path {
      if !s.isEmpty { s += " " }
      s += c.name
    }
    return s
  }

  /// "tokenbridge pin change [--token <token>] … <key-id>", or "tokenbridge pin <subcommand>" for a group.
  public static func usage(_ path: [CommandSpec]) -> String { usageUnits(path).joined(separator: " ") }

  /// The usage line's parts, each kept whole when it is wrapped: the command name, then one per argument.
  static func usageUnits(_ path: [CommandSpec]) -> [String] {
    let c = path[path.count - 1]
    var units = [commandName(path)]
    if c.run == nil { return units + ["<subcommand>"] }
    for a in c.arguments where !a.isPositional {
      let d = a.display + (a.isRepeatable ? " ..." : "")
      units.append(a.isRequired ? d : "[" + d + "]")
    }
    for a in c.arguments where a.isPositional {
      units.append(a.isRequired ? a.display : "[" + a.display + "]")
    }
    return units
  }

  /// A usage error as printed on stderr: the message, the usage line, where to find help.
  public static func usageError(_ message: String, _ path: [CommandSpec]) -> String {
    "Error: \(message)\nUsage: \(usage(path))\n  See '\(commandName(path)) --help' for more information.\n"
  }

  public static func text(_ path: [CommandSpec], version: String?) -> String {
    let c = path[path.count - 1]
    var s = ""
    if !c.abstract.isEmpty { s += wrap("OVERVIEW: " + c.abstract, indent: 0) + "\n" }
    if !c.discussion.isEmpty {
      for paragraph in c.discussion.split(separator: "\n", omittingEmptySubsequences: false) {
        s += wrap(String(paragraph), indent: 0)
      }
      s += "\n"
    }
    s += wrap(["USAGE:"] + usageUnits(path), indent: 7) + "\n"
    var positionals: [ArgumentSpec] = []
    var options: [ArgumentSpec] = []
    for a in c.arguments {
      if a.isPositional { positionals.append(a) } else { options.append(a) }
    }
    if !positionals.isEmpty {
      s += "ARGUMENTS:\n"
      for a in positionals { s += entry(a.display, a.help) }
      s += "\n"
    }
    s += "OPTIONS:\n"
    for a in options { s += entry(a.display, a.help) }
    if version != nil { s += entry("--version", "Show the version.") }
    s += entry("-h, --help", "Show help information.")
    s += "\n"
    if !c.subcommands.isEmpty {
      s += "SUBCOMMANDS:\n"
      for sub in c.subcommands {
        s += entry(sub.name + (sub.name == c.defaultSubcommand ? " (default)" : ""), sub.abstract)
      }
      s += "\n"
      let prefix = commandName(Array(path.dropFirst()))
      s += "  See '\(path[0].name) help \(prefix.isEmpty ? "" : prefix + " ")<subcommand>' for detailed help.\n"
    }
    return s
  }

  /// "  label" then the text in the description column (on the next line when the label is too long).
  static func entry(_ label: String, _ text: String) -> String {
    var s = "  " + label
    if label.count + 2 > column - 2 {
      s += "\n" + String(repeating: " ", count: column)
    } else {
      s += String(repeating: " ", count: column - 2 - label.count)
    }
    return s + wrap(text, indent: column, first: column)
  }

  /// Wraps `text` at `width` columns (words kept whole); lines after the first start with `indent` spaces.
  /// `first`: the column the first line starts at. Ends with a newline.
  static func wrap(_ text: String, indent: Int, first: Int = 0) -> String {
    var words: [String] = []
    for w in text.split(separator: " ") { words.append(String(w)) }
    return wrap(words, indent: indent, first: first)
  }

  static func wrap(_ words: [String], indent: Int, first: Int = 0) -> String {
    var out = ""
    var col = first
    var lineHasWord = false
    for (i, word) in words.enumerated() {
      // A word ends at most at `width`, and before it when a space follows it.
      let n = word.count + (i == words.count - 1 ? 0 : 1)
      if lineHasWord && col + 1 + n > width {
        out += "\n" + String(repeating: " ", count: indent)
        col = indent
        lineHasWord = false
      }
      if lineHasWord {
        out += " "
        col += 1
      }
      out += word
      col += word.count
      lineHasWord = true
    }
    return out + "\n"
  }
}
