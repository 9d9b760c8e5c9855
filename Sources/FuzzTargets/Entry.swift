import Foundation

/// Fuzz targets for the parsers that read hostile input (docs/testing.md, "Fuzzing"). One executable holds them all; the
/// target is chosen by `TB_FUZZ_TARGET`.
///
/// Built with `-sanitize=fuzzer,address -DFUZZING` (see `Tools/fuzz`), libFuzzer supplies `main` and calls
/// `LLVMFuzzerTestOneInput`. Built normally (`swift build`), `main` below replays files instead:
/// `tokenbridge-fuzz TARGET FILE|DIR...` runs every input once and exits non-zero if one breaks a property
/// (a violated property traps, which is what the fuzzer reports as a crash).
enum FuzzTargets {
  static let all: [(name: String, run: @Sendable ([UInt8]) -> Void)] = [
    ("uaf-tlv", UAFTLVTarget.run),
    ("uaf-json", UAFJSONTarget.run),
    ("apdu", APDUTarget.run),
    ("ctap-cbor", CTAPCBORTarget.run),
    ("config", ConfigTarget.run),
    ("pin-fd", PinFDTarget.run),
    ("oob-payload", OutOfBandPayloadTarget.run),
    ("callback-url", CallbackURLTarget.run),
    ("jwe", JWETarget.run),
    ("device-answer", DeviceAnswerTarget.run),
    ("assuan", AssuanTarget.run),
    ("udev-name", UdevNameTarget.run),
    ("native-messaging", NativeMessagingTarget.run),
  ]

  static func named(_ name: String) -> (@Sendable ([UInt8]) -> Void)? { all.first { $0.name == name }?.run }
}

/// A violated property: traps so that libFuzzer records the input as a crash.
func check(_ condition: @autoclosure () -> Bool, _ what: @autoclosure () -> String) {
  if !condition() { fatalError("fuzz property violated: \(what())") }
}

/// Reads fuzz data front to back; every read succeeds (zeros once the data is used up).
struct FuzzInput {
  var bytes: [UInt8]
  var index = 0
  init(_ bytes: [UInt8]) { self.bytes = bytes }
  var isEmpty: Bool { index >= bytes.count }
  mutating func byte() -> UInt8 {
    guard index < bytes.count else { return 0 }
    defer { index += 1 }
    return bytes[index]
  }
  mutating func take(_ n: Int) -> [UInt8] {
    let end = min(bytes.count, index + max(0, n))
    defer { index = end }
    return Array(bytes[index..<end])
  }
  mutating func rest() -> [UInt8] { take(bytes.count - index) }
}

/// Runs one input through the target `TB_FUZZ_TARGET` names (libFuzzer's callback).
nonisolated(unsafe) var selectedTarget: (@Sendable ([UInt8]) -> Void)?

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
  if selectedTarget == nil {
    let name = ProcessInfo.processInfo.environment["TB_FUZZ_TARGET"] ?? ""
    guard let run = FuzzTargets.named(name) else {
      fatalError("TB_FUZZ_TARGET must name a target: \(FuzzTargets.all.map(\.name).joined(separator: ", "))")
    }
    selectedTarget = run
  }
  let bytes = size == 0 || data == nil ? [] : Array(UnsafeBufferPointer(start: data, count: size))
  selectedTarget!(bytes)
  return 0
}

#if FUZZING
  // SwiftPM links an executable's `main` to this module's entry point (`--defsym`), so libFuzzer's own `main` is
  // not used; ours hands the command line to libFuzzer's driver (LLVMFuzzerRunDriver, libFuzzer ≥ LLVM 11).
  @_silgen_name("LLVMFuzzerRunDriver")
  func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
  ) -> Int32

  @main
  enum FuzzDriver {
    static func main() {
      var argc = CommandLine.argc
      var argv = CommandLine.unsafeArgv
      exit(LLVMFuzzerRunDriver(&argc, &argv, { fuzzOne($0, $1) }))
    }
  }
#else
  @main
  enum Replay {
    static func main() {
      let args = Array(CommandLine.arguments.dropFirst())
      if args.first == "--list" {
        for t in FuzzTargets.all { print(t.name) }
        return
      }
      guard args.count >= 2, let run = FuzzTargets.named(args[0]) else {
        FileHandle.standardError.write(
          Data(
            "usage: tokenbridge-fuzz --list | TARGET FILE|DIR...  (targets: \(FuzzTargets.all.map(\.name).joined(separator: ", ")))\n"
              .utf8))
        exit(64)
      }
      var count = 0
      for path in args.dropFirst() {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
          FileHandle.standardError.write(Data("tokenbridge-fuzz: no such file: \(path)\n".utf8))
          exit(66)
        }
        let files =
          isDir.boolValue
          ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
          : [path]
        for file in files {
          guard let data = FileManager.default.contents(atPath: file) else { continue }
          run(Array(data))
          count += 1
        }
      }
      print("\(args[0]): replayed \(count) inputs")
    }
  }
#endif
