import FoundationEssentials

/// One HTTP request of the backend client (what `CappedExchange` sends): the URL, the method, header fields in
/// order, and the body.
public struct HTTPRequest: Sendable {
  public var url: URL
  public var httpMethod = "GET"
  public var httpBody: Data?
  public private(set) var headerFields: [(name: String, value: String)] = []

  public init(url: URL) { self.url = url }

  /// Sets `name` (replacing a field of that name, compared without case), or removes it when `value` is nil.
  public mutating func setValue(_ value: String?, forHTTPHeaderField name: String) {
    headerFields.removeAll { $0.name.lowercased() == name.lowercased() }
    if let value { headerFields.append((name, value)) }
  }

  public func value(forHTTPHeaderField name: String) -> String? {
    headerFields.first { $0.name.lowercased() == name.lowercased() }?.value
  }
}

/// An answer's status and header fields (its body is returned beside it).
public struct HTTPResponse: Sendable {
  public var url: URL
  public var statusCode: Int
  public var headerFields: [(name: String, value: String)]

  public init(url: URL, statusCode: Int, headerFields: [(name: String, value: String)] = []) {
    self.url = url
    self.statusCode = statusCode
    self.headerFields = headerFields
  }

  /// The first field named `name` (compared without case).
  public func value(forHTTPHeaderField name: String) -> String? {
    headerFields.first { $0.name.lowercased() == name.lowercased() }?.value
  }
}
