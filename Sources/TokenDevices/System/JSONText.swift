/// JSON text of an `Encodable` value, byte for byte as FoundationEssentials' `JSONEncoder` writes it with
/// `[.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]`: two-space indent, `"key" : value`, keys in UTF-8 byte
/// order, `[`/`{` then an empty line for an empty array/object, `"` `\` and control characters escaped (`\n`,
/// `\t`, `\r`, `\b`, `\f`, else `\u00xx`), everything else (DEL, non-ASCII) as it is.
///
/// Why not `JSONEncoder` itself (issue 12): it checks every value against the types it encodes its own way
/// (`Date`, `Data`, `URL`, `Decimal`, string-keyed dictionaries) with dynamic casts, and each first cast of a
/// type scans the binary's protocol-conformance records. In a short-lived CLI every cast is a first one: one
/// token's `tokens --json` spent 693K of its 1.75M instructions in the encoder (callgrind). This encoder casts
/// nothing: the types a caller names as `unsupported` (metatype comparison), floating-point numbers, and anything
/// else it does not write the way `JSONEncoder` does throw `Unsupported`, and the caller falls back to
/// `JSONEncoder` for that value.
public enum JSONText {
  /// Why a value was left to `JSONEncoder`.
  public enum Unsupported: Error, Equatable {
    /// A `Double` or `Float`: JSONEncoder's number formatting is not reproduced here.
    case floatingPoint
    /// A type the caller named in `unsupported` (e.g. `Date`, which JSONEncoder writes its own way).
    case listedType
    /// The value itself encoded nothing: JSONEncoder refuses that at the top level ("did not encode any values";
    /// nested, it writes an empty object, as this encoder does).
    case nothingEncoded
  }

  public static func encode<T: Encodable>(_ value: T, unsupported: [Any.Type] = []) throws -> String {
    let context = Context(unsupported: unsupported.map(ObjectIdentifier.init))
    if context.unsupported.contains(ObjectIdentifier(T.self)) { throw Unsupported.listedType }
    let root = Node()
    try value.encode(to: NodeEncoder(node: root, context: context, codingPath: []))
    if case .unset = root.kind { throw Unsupported.nothingEncoded }
    var w = Writer()
    write(root, into: &w)
    return w.text
  }

  // MARK: - The value tree

  final class Node {
    enum Kind {
      case unset
      case null
      case literal(String)  // true, false, an integer
      case string(String)
      case array([Node])
      case object([String: Node])
    }
    var kind: Kind = .unset
  }

  final class Context {
    let unsupported: [ObjectIdentifier]
    init(unsupported: [ObjectIdentifier]) { self.unsupported = unsupported }

    func node<T: Encodable>(for value: T) throws -> Node {
      if unsupported.contains(ObjectIdentifier(T.self)) { throw Unsupported.listedType }
      let node = Node()
      try value.encode(to: NodeEncoder(node: node, context: self, codingPath: []))
      if case .unset = node.kind { node.kind = .object([:]) }  // encoded nothing: JSONEncoder writes {}
      return node
    }
  }

  // MARK: - Writing

  /// Through `Writer`, which keeps the layout (indentation, commas, empty containers) in one place.
  static func write(_ node: Node, into w: inout Writer) {
    switch node.kind {
    case .unset, .null: w.literal("null")
    case .literal(let s): w.literal(s)
    case .string(let s): w.string(s)
    case .array(let items): w.array { w in for item in items { write(item, into: &w) } }
    case .object(let fields):
      w.object { w in
        for key in sortedKeys(fields.keys) {
          w.key(key)
          write(fields[key]!, into: &w)
        }
      }
    }
  }

  /// Keys in the order JSONEncoder's `.sortedKeys` writes them: by their UTF-8 bytes.
  static func sortedKeys(_ keys: some Collection<String>) -> [String] {
    keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
  }

  static func put(_ s: StaticString, _ out: inout [UInt8]) {
    s.withUTF8Buffer { out.append(contentsOf: $0) }
  }

  static func pad(_ n: Int, _ out: inout [UInt8]) {
    // From a buffer of spaces: appending a `repeatElement` goes element by element through the generic path
    // (42k instructions of a twelve-token listing, callgrind).
    let spaces: StaticString = "                                "
    var left = n
    while left > 0 {
      let k = min(left, spaces.utf8CodeUnitCount)
      spaces.withUTF8Buffer { out.append(contentsOf: UnsafeBufferPointer(rebasing: $0[0..<k])) }
      left -= k
    }
  }

  /// A JSON string as `JSONEncoder` writes it without escaping slashes: quote, backslash and control characters
  /// escaped, everything else as it is (also `Account.json`'s, which writes its 10,000 rows without a tree). Every
  /// character escaped is ASCII, so the UTF-8 bytes are escaped one by one.
  public static func writeString(_ s: String, into out: inout [UInt8]) {
    out.append(UInt8(ascii: "\""))
    var s = s
    s.withUTF8 { bytes in
      guard bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
        out.append(contentsOf: bytes)
        return
      }
      for b in bytes {
        switch b {
        case UInt8(ascii: "\""): put("\\\"", &out)
        case UInt8(ascii: "\\"): put("\\\\", &out)
        case UInt8(ascii: "\n"): put("\\n", &out)
        case UInt8(ascii: "\t"): put("\\t", &out)
        case UInt8(ascii: "\r"): put("\\r", &out)
        case 0x08: put("\\b", &out)
        case 0x0C: put("\\f", &out)
        case 0..<0x20:
          let hex = Array("0123456789abcdef".utf8)
          put("\\u00", &out)
          out.append(hex[Int(b >> 4)])
          out.append(hex[Int(b & 0x0F)])
        default: out.append(b)
        }
      }
    }
    out.append(UInt8(ascii: "\""))
  }

  // MARK: - Encoder

  struct NodeEncoder: Encoder {
    let node: Node
    let context: Context
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
      if case .object = node.kind {} else { node.kind = .object([:]) }
      return KeyedEncodingContainer(Keyed<Key>(node: node, context: context, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
      if case .array = node.kind {} else { node.kind = .array([]) }
      return Unkeyed(node: node, context: context, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
      Single(node: node, context: context, codingPath: codingPath)
    }
  }

  struct Keyed<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: Node
    let context: Context
    let codingPath: [any CodingKey]

    func set(_ key: Key, _ child: Node) {
      guard case .object(var fields) = node.kind else { return }
      node.kind = .unset  // let `fields` be uniquely referenced while it changes
      fields[key.stringValue] = child
      node.kind = .object(fields)
    }

    func leaf(_ kind: Node.Kind, _ key: Key) {
      let child = Node()
      child.kind = kind
      set(key, child)
    }

    mutating func encodeNil(forKey key: Key) throws { leaf(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { leaf(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { throw Unsupported.floatingPoint }
    mutating func encode(_ value: Float, forKey key: Key) throws { throw Unsupported.floatingPoint }
    mutating func encode(_ value: Int, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { leaf(.literal(String(value)), key) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
      set(key, try context.node(for: value))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
      -> KeyedEncodingContainer<NestedKey>
    {
      let child = Node()
      child.kind = .object([:])
      set(key, child)
      return KeyedEncodingContainer(
        Keyed<NestedKey>(node: child, context: context, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
      let child = Node()
      child.kind = .array([])
      set(key, child)
      return Unkeyed(node: child, context: context, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder { superEncoder(named: "super") }
    mutating func superEncoder(forKey key: Key) -> any Encoder { superEncoder(named: key.stringValue) }

    func superEncoder(named name: String) -> any Encoder {
      let child = Node()
      guard case .object(var fields) = node.kind else {
        return NodeEncoder(node: child, context: context, codingPath: codingPath)
      }
      node.kind = .unset
      fields[name] = child
      node.kind = .object(fields)
      return NodeEncoder(node: child, context: context, codingPath: codingPath)
    }
  }

  struct Unkeyed: UnkeyedEncodingContainer {
    let node: Node
    let context: Context
    let codingPath: [any CodingKey]

    var count: Int {
      if case .array(let items) = node.kind { return items.count }
      return 0
    }

    func append(_ child: Node) {
      guard case .array(var items) = node.kind else { return }
      node.kind = .unset
      items.append(child)
      node.kind = .array(items)
    }

    func leaf(_ kind: Node.Kind) {
      let child = Node()
      child.kind = kind
      append(child)
    }

    mutating func encodeNil() throws { leaf(.null) }
    mutating func encode(_ value: Bool) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: String) throws { leaf(.string(value)) }
    mutating func encode(_ value: Double) throws { throw Unsupported.floatingPoint }
    mutating func encode(_ value: Float) throws { throw Unsupported.floatingPoint }
    mutating func encode(_ value: Int) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: Int8) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: Int16) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: Int32) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: Int64) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: UInt) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: UInt8) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: UInt16) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: UInt32) throws { leaf(.literal(String(value))) }
    mutating func encode(_ value: UInt64) throws { leaf(.literal(String(value))) }
    mutating func encode<T: Encodable>(_ value: T) throws { append(try context.node(for: value)) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
      -> KeyedEncodingContainer<NestedKey>
    {
      let child = Node()
      child.kind = .object([:])
      append(child)
      return KeyedEncodingContainer(Keyed<NestedKey>(node: child, context: context, codingPath: codingPath))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
      let child = Node()
      child.kind = .array([])
      append(child)
      return Unkeyed(node: child, context: context, codingPath: codingPath)
    }

    mutating func superEncoder() -> any Encoder {
      let child = Node()
      append(child)
      return NodeEncoder(node: child, context: context, codingPath: codingPath)
    }
  }

  struct Single: SingleValueEncodingContainer {
    let node: Node
    let context: Context
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { node.kind = .null }
    mutating func encode(_ value: Bool) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: String) throws { node.kind = .string(value) }
    mutating func encode(_ value: Double) throws { throw Unsupported.floatingPoint }
    mutating func encode(_ value: Float) throws { throw Unsupported.floatingPoint }
    mutating func encode(_ value: Int) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: Int8) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: Int16) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: Int32) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: Int64) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: UInt) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: UInt8) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: UInt16) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: UInt32) throws { node.kind = .literal(String(value)) }
    mutating func encode(_ value: UInt64) throws { node.kind = .literal(String(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
      let inner = try context.node(for: value)
      node.kind = inner.kind
    }
  }
}

extension JSONText {
  /// Writes JSON text in JSONEncoder's pretty, sorted layout, into UTF-8 bytes made a `String` once at the end
  /// (appending to a `String` piece by piece, a space at a time for the indent, was 1.7M instructions of a 12-token
  /// `tokens --json`, callgrind). `encode` writes its value tree with it; types that write themselves
  /// (`TokenInfo.json`) use it without a tree or `Encodable`. The caller writes an object's fields in sorted key
  /// order; the writer does the commas, new lines and indentation.
  public struct Writer {
    public private(set) var bytes: [UInt8] = []
    /// How many items each open array or object holds so far, innermost last.
    private var counts: [Int] = []

    public init() { bytes.reserveCapacity(4096) }

    public var text: String { String(decoding: bytes, as: UTF8.self) }

    /// Where the next item goes: after a comma when it is not the first, on a new line, indented.
    private mutating func item() {
      guard !counts.isEmpty else { return }
      if counts[counts.count - 1] > 0 { bytes.append(UInt8(ascii: ",")) }
      counts[counts.count - 1] += 1
      bytes.append(UInt8(ascii: "\n"))
      pad(2 * counts.count, &bytes)
    }

    private mutating func open(_ bracket: UInt8) {
      value()
      bytes.append(bracket)
      counts.append(0)
    }

    private mutating func close(_ bracket: UInt8) {
      let n = counts.removeLast()
      bytes.append(UInt8(ascii: "\n"))
      if n == 0 { bytes.append(UInt8(ascii: "\n")) }  // JSONEncoder writes an empty one as "[", an empty line, "]"
      pad(2 * counts.count, &bytes)
      bytes.append(bracket)
    }

    /// An object (`body` writes its fields), as an array item or a field's value.
    public mutating func object(_ body: (inout Writer) -> Void) {
      open(UInt8(ascii: "{"))
      body(&self)
      close(UInt8(ascii: "}"))
    }

    /// An array (`body` writes its items).
    public mutating func array(_ body: (inout Writer) -> Void) {
      open(UInt8(ascii: "["))
      body(&self)
      close(UInt8(ascii: "]"))
    }

    /// A field's key; its value follows (a value written after a key is not an item of its own).
    public mutating func key(_ name: String) {
      item()
      writeString(name, into: &bytes)
      put(" : ", &bytes)
      counts.append(-1)  // the value that follows: no separator, no new line
    }

    /// Before a value: right after its key, or as an item of its own.
    private mutating func value() {
      if counts.last == -1 {
        counts.removeLast()
      } else {
        item()
      }
    }

    /// A value written as it is (`null`, or the text of a number or Boolean the encoder already made).
    mutating func literal(_ s: String) {
      value()
      bytes.append(contentsOf: s.utf8)
    }

    public mutating func string(_ s: String) {
      value()
      writeString(s, into: &bytes)
    }

    public mutating func integer(_ n: some BinaryInteger) {
      value()
      bytes.append(contentsOf: String(n).utf8)
    }

    public mutating func bool(_ b: Bool) {
      value()
      put(b ? "true" : "false", &bytes)
    }

    public mutating func strings(_ items: [String]) {
      array { w in for s in items { w.string(s) } }
    }

    // A field and its value; a nil value writes nothing (as `encodeIfPresent` leaves the key out).

    public mutating func field(_ name: String, _ value: String?) {
      guard let value else { return }
      key(name)
      string(value)
    }

    public mutating func field(_ name: String, _ value: (some BinaryInteger)?) {
      guard let value else { return }
      key(name)
      integer(value)
    }

    public mutating func field(_ name: String, _ value: Bool?) {
      guard let value else { return }
      key(name)
      bool(value)
    }

    public mutating func field(_ name: String, _ value: [String]?) {
      guard let value else { return }
      key(name)
      strings(value)
    }

    public mutating func field(_ name: String, _ value: (some JSONWritable)?) {
      guard let value else { return }
      key(name)
      value.write(&self)
    }
  }
}

/// A value that writes itself with a `JSONText.Writer` (as one JSON value).
public protocol JSONWritable {
  func write(_ w: inout JSONText.Writer)
}
