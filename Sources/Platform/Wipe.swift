/// Overwrites a buffer holding a secret before it is released.
@inline(never)
public func wipe(_ bytes: inout [UInt8]) {
  for i in bytes.indices { bytes[i] = 0 }
  bytes.removeAll()
}
