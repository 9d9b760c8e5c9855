import ArgumentParser
import FoundationEssentials
import Glibc
import Platform
import Prompts
import TokenBridge

struct Key: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "key",
    abstract: "PIV keys: generate, public key, sign.", subcommands: [KeyGenerate.self, KeyPublic.self, KeySign.self])
}

/// `--slot`: a refused value is a usage error naming it ("The value 'zz' is invalid for '--slot <slot>': …").
struct SlotArgument: ParsableArguments {
  @Option(
    help: "Key slot: 9a, 9c, 9d, 9e or a retired slot 82-95.",
    transform: { s in
      guard let slot = PIVSlot(string: s) else {
        throw ValidationError("'\(displayable(s))' is not a PIV key slot (9a, 9c, 9d, 9e, 82-95)")
      }
      return slot
    })
  var slot: PIVSlot
}

struct KeyGenerate: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "generate",
    abstract: "Generate a P-256 key in a slot; prints the public key (PEM).",
    discussion: """
      Needs the management key: the default one, one read as hex from --management-key-fd, or the \
      PIN-protected one that yubikey-manager stores on the card (--pin-protected-management-key; asks the PIN).
      """)
  @OptionGroup var options: GlobalOptions
  @OptionGroup var slot: SlotArgument
  @Option(help: "Read the management key (hex) from this file descriptor.")
  var managementKeyFd: Int32?
  @Flag(help: "Use the PIN-protected management key stored on the card.")
  var pinProtectedManagementKey = false
  @Flag(help: "Overwrite a key already in the slot without asking.")
  var force = false

  func validate() throws {
    if managementKeyFd != nil && pinProtectedManagementKey {
      throw ValidationError("--management-key-fd and --pin-protected-management-key exclude each other")
    }
    if let fd = managementKeyFd, fd < 0 || fcntl(fd, F_GETFD) < 0 {
      throw ValidationError("--management-key-fd \(fd) is not an open file descriptor")
    }
  }

  func run() throws {
    try options.execute {
      let prompter = try options.prompter()
      let token = try options.selection(includeFIDO2: false).choose(
        id: options.token, selector: prompter.terminal.map(TerminalTokenSelector.init))
      var source = ManagementKeySource.defaultKey
      if pinProtectedManagementKey { source = .pinProtected }
      if let fd = managementKeyFd {
        guard let line = try SecretLineReader(fd: fd, timeout: options.timeout).next() else {
          throw InputError.noMoreInput(expected: .managementKey)
        }
        source = try PIVKeys.managementKey(hex: line)
      }
      let point = try PIVKeys(token: token).generate(
        slot: slot.slot, managementKey: source, force: force, verifier: prompter,
        confirmOverwrite: { s in
          // Without a terminal (or --yes) there is nobody to ask: refuse, and say --force.
          guard prompter.canAsk || options.yes else { return false }
          return try prompter.confirm(.overwriteSlot(s))
        })
      let pem = try PublicKeyFormat.pem(point)
      if options.json {
        print(Render.json(["slot": "\(slot.slot)", "publicKey": pem, "token": token.info.id]))
      } else {
        print(pem)
      }
    }
  }
}

struct KeyPublic: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "public", abstract: "Print the public key of a slot (PEM).")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var slot: SlotArgument

  func run() throws {
    try options.execute {
      let token = try options.selection(includeFIDO2: false).choose(
        id: options.token, selector: try options.prompter().terminal.map(TerminalTokenSelector.init))
      print(try PublicKeyFormat.pem(try PIVKeys(token: token).publicKey(slot: slot.slot)))
    }
  }
}

struct KeySign: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "sign",
    abstract: "Sign SHA-256 of a file (or stdin) with the key in a slot; writes a DER ECDSA signature.")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var slot: SlotArgument
  @Option(help: "File to sign (default: stdin).")
  var input: String?
  @Option(help: "Write the DER signature here (default: hex on stdout).")
  var output: String?

  func run() throws {
    try options.execute {
      let message: Data
      if let input {
        guard let d = FileManager.default.contents(atPath: input) else {
          throw InputError.file(path: input, errno: errno == 0 ? ENOENT : errno)
        }
        message = d
      } else {
        message = Data(FileIO.read(0))
      }
      let prompter = try options.prompter()
      // A signature names no token: a script's run does not ask a lone card for its serial.
      let token = try options.selection(includeFIDO2: false, identify: false).choose(
        id: options.token, selector: prompter.terminal.map(TerminalTokenSelector.init))
      let sig = try PIVKeys(token: token).sign(slot: slot.slot, message: Array(message), verifier: prompter)
      if let output {
        guard FileManager.default.createFile(atPath: output, contents: Data(sig)) else {
          throw InputError.file(path: output, errno: errno)
        }
      } else {
        print(Hex.lowercase(sig))
      }
    }
  }
}
