/// The EC public key of an X.509 certificate (RFC 5280 §4.1: Certificate → tbsCertificate →
/// subjectPublicKeyInfo → BIT STRING), read with the BER-TLV walker PIV already uses. Only what a PIV slot's
/// certificate object needs: no signature check (the point is compared by whoever uses it).
enum X509PublicKey {
  /// The uncompressed point `04‖X‖Y` of an id-ecPublicKey certificate; nil for anything else.
  static func ecPoint(certificate der: [UInt8]) -> [UInt8]? {
    guard let cert = BERTLV.parse(der), cert.count == 1, cert[0].tag == 0x30,
      let parts = BERTLV.parse(cert[0].value), let tbs = parts.first, tbs.tag == 0x30,
      var fields = BERTLV.parse(tbs.value)
    else { return nil }
    if fields.first?.tag == 0xA0 { fields.removeFirst() }  // [0] version
    // serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo
    guard fields.count >= 6, fields[5].tag == 0x30, let spki = BERTLV.parse(fields[5].value), spki.count == 2,
      spki[0].tag == 0x30, spki[1].tag == 0x03, let alg = BERTLV.parse(spki[0].value),
      alg.first?.tag == 0x06, alg.first?.value == idECPublicKey
    else { return nil }
    let bits = spki[1].value
    guard bits.count > 2, bits[0] == 0, bits[1] == 0x04 else { return nil }  // no unused bits; uncompressed
    return Array(bits.dropFirst())
  }

  /// 1.2.840.10045.2.1 (RFC 5480 §2.1.1).
  static let idECPublicKey: [UInt8] = [0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01]
}
