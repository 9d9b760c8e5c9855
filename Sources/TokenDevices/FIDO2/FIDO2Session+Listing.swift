import CFido2
import FoundationEssentials
import Glibc
import Platform

/// Which keys are present: libfido2's manifest and the virtual keys, and what sysfs tells without libfido2.
extension FIDO2Session {
  static let initialized: Void = { fido_init(0) }()

  /// Loads libfido2 (at the first FIDO2 use, not at start-up); call before any libfido2 function.
  public static func loadLibrary() throws(TokenError) {
    do { try SystemLibrary.fido2.load() } catch { throw .libraryMissing(error) }
  }

  /// The virtual keys' sockets that exist: `virtualPaths`, else those named in `TOKENBRIDGE_VIRTUAL_FIDO` (socket
  /// paths separated by `:`).
  static func virtualSockets(_ virtualPaths: [String]?) -> [String] {
    (virtualPaths ?? namedVirtualKeys()).filter { access($0, F_OK) == 0 }
  }

  /// The socket paths in `TOKENBRIDGE_VIRTUAL_FIDO` (separated by `:`).
  static func namedVirtualKeys() -> [String] {
    (Environment.value("TOKENBRIDGE_VIRTUAL_FIDO") ?? "").utf8.split(separator: UInt8(ascii: ":")).map {
      String(decoding: $0, as: UTF8.self)
    }
  }

  /// Whether a key may be present: a virtual key's socket, or a hidraw node with the FIDO usage page. Without
  /// either, libfido2 would find nothing, so it is not loaded to look (a PIV-only command stays without it).
  public static func keysPossible(virtualPaths: [String]? = nil) -> Bool {
    keysPossible(virtualSockets: virtualSockets(virtualPaths))
  }

  static func keysPossible(virtualSockets: [String]) -> Bool {
    !virtualSockets.isEmpty || HIDReportDescriptor.anyFIDONode()
  }

  /// How many keys `list` may name, told without libfido2 (from sysfs and the virtual key list; may count one
  /// more, never fewer). Discovery's PC/SC side needs it while the FIDO2 side is still loading the library.
  public static func expectedKeys(virtualPaths: [String]? = nil) -> Int {
    virtualSockets(virtualPaths).count + HIDReportDescriptor.fidoNodeCount()
  }

  /// Keys present: libfido2's manifest (`fido_dev_info_manifest`: hidraw nodes with the FIDO usage page) plus the
  /// virtual keys named in `TOKENBRIDGE_VIRTUAL_FIDO`. None when no key is possible (`keysPossible`: libfido2 is
  /// then not loaded) or libfido2 cannot be loaded (`loadLibrary` says why).
  public static func list(virtualPaths: [String]? = nil) -> [FIDO2DeviceRef] {
    let virtual = virtualSockets(virtualPaths)
    guard keysPossible(virtualSockets: virtual), (try? loadLibrary()) != nil else { return [] }
    _ = initialized
    var out: [FIDO2DeviceRef] = []
    if !HIDReportDescriptor.anyFIDONode() {
      // No hidraw key: libfido2's manifest would walk udev for nothing.
    } else if let list = fido_dev_info_new(64) {
      var n = 0
      if fido_dev_info_manifest(list, 64, &n) == FIDO_OK {
        for i in 0..<n {
          guard let di = fido_dev_info_ptr(list, i), let p = fido_dev_info_path(di) else { continue }
          // libfido2 gives "" for a USB device without a product string.
          let product =
            fido_dev_info_product_string(di).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
            ?? "FIDO2 key"
          out.append(FIDO2DeviceRef(path: String(cString: p), product: product, isVirtual: false))
        }
      }
      var l: OpaquePointer? = list
      fido_dev_info_free(&l, 64)
    }
    for p in virtual {
      out.append(FIDO2DeviceRef(path: p, product: "virtual FIDO2 key", isVirtual: true))
    }
    return out
  }

  /// The keys sysfs (hidraw nodes with the FIDO usage page on USB, as libfido2's manifest takes them) and the
  /// virtual key list name, found without libfido2: to say which keys cannot be used when it cannot be loaded.
  static func presentWithoutLibrary(virtualPaths: [String]?) -> [FIDO2DeviceRef] {
    HIDReportDescriptor.libfido2Nodes().map {
      FIDO2DeviceRef(path: "/dev/\($0.node)", product: $0.product ?? "FIDO2 key", isVirtual: false)
    } + virtualSockets(virtualPaths).map { FIDO2DeviceRef(path: $0, product: "virtual FIDO2 key", isVirtual: true) }
  }
}
