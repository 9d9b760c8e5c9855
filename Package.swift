// swift-tools-version:6.0
import PackageDescription

let package = Package(
  name: "TokenBridge",
  platforms: [.macOS(.v14)],
  products: [
    .library(name: "TokenBridge", targets: ["TokenBridge"]),
    .library(name: "TokenDevices", targets: ["TokenDevices"]),
    .library(name: "UAFCore", targets: ["UAFCore"]),
    .executable(name: "tokenbridge", targets: ["tokenbridge"]),
    .executable(name: "virtual-token", targets: ["virtual-token"]),
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
  ],
  targets: [
    // System-library shims (found with pkg-config; headers from Debian's -dev packages, see Tools/setup).
    .target(name: "CPCSC", linkerSettings: [.linkedLibrary("pcsclite")]),
    .systemLibrary(name: "CFido2", providers: [.apt(["libfido2-dev"])]),
    .systemLibrary(name: "CUSB", providers: [.apt(["libusb-1.0-0-dev"])]),
    .systemLibrary(name: "CLibCrypto", providers: [.apt(["libssl-dev"])]),
    .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"])]),
    // HTTP(S) through libcurl, loaded with dlopen at the first request (not linked: no HTTP/TLS library is mapped
    // at start-up); its header comes from libcurl4-openssl-dev, the library at run time from libcurl4.
    .target(name: "CHTTP"),
    // QR codes in PNG/JPEG images (out-of-band payloads): libpng/libjpeg decode, zbar scans (headers from
    // libzbar-dev, libpng-dev, libjpeg-dev). Loaded with dlopen at the first scan, not linked: zbar alone brings
    // ~15 libraries (X11, D-Bus, v4l) that every other command would map at start-up.
    .target(name: "CQRCode"),

    // Protocol core: pure Swift, no I/O.
    .target(name: "UAFCore"),
    // Device layer: PC/SC + PIV, libfido2, libusb. Knows nothing of UAF.
    .target(name: "TokenDevices", dependencies: ["CPCSC", "CFido2", "CUSB", "CLibCrypto"]),
    // Client library: operations and interaction protocols.
    .target(
      name: "TokenBridge",
      dependencies: [
        "UAFCore", "TokenDevices", "CQRCode", "CHTTP", .product(name: "Crypto", package: "swift-crypto"),
        "CSQLite",
      ]),
    .executableTarget(
      name: "tokenbridge",
      dependencies: ["TokenBridge", .product(name: "ArgumentParser", package: "swift-argument-parser")]),

    // Simulators: implement the public specs, share no code with the client.
    .target(
      name: "VirtualTokens",
      dependencies: ["CLibCrypto", .product(name: "Crypto", package: "swift-crypto")]),
    .executableTarget(
      name: "virtual-token",
      dependencies: ["VirtualTokens", .product(name: "ArgumentParser", package: "swift-argument-parser")]),

    // Fuzz targets (README "Fuzzing", Tools/fuzz): one executable, the target chosen by TB_FUZZ_TARGET; built
    // without -DFUZZING it replays corpus files (the test suite does that).
    .executableTarget(
      name: "tokenbridge-fuzz", dependencies: ["UAFCore", "TokenDevices", "TokenBridge", "VirtualTokens"],
      path: "Sources/FuzzTargets"),

    .testTarget(
      name: "UAFCoreTests", dependencies: ["UAFCore", .product(name: "Crypto", package: "swift-crypto")]),
    .testTarget(name: "TokenDevicesTests", dependencies: ["TokenDevices"]),
    .testTarget(
      name: "VirtualTokensTests",
      dependencies: ["VirtualTokens", "CLibCrypto", .product(name: "Crypto", package: "swift-crypto")]),
    .testTarget(name: "TokenBridgeTests", dependencies: ["TokenBridge", "TokenDevices", "UAFCore"]),
    .testTarget(
      name: "IntegrationTests",
      dependencies: [
        "TokenBridge", "TokenDevices", "UAFCore", .product(name: "Crypto", package: "swift-crypto"),
      ]),
  ]
)
