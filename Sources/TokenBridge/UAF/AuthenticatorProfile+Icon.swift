extension AuthenticatorProfile {
  /// The icon of both kinds (the Client API's `Authenticator.icon`, the metadata statement's `icon`): a 32×32
  /// RGBA PNG of a card with its contact chip, as a `data:` URL (RFC 2397).
  public static let icon =
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAACAAAAAgCAYAAABzenr0AAAAQElEQVR42mNgGAWjYBQgAXm/yv/0wANqOU5HjDpg0DngygJxvHjUAaMOGHXAqANGi+JRBww/Bwx4k2wUjIIRCwBc/EwBef90VgAAAABJRU5ErkJggg=="
}
