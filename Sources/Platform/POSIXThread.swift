import Glibc

/// Threads of their own for blocking calls (libusb's event loop, inotify, SCardGetStatusChange, libfido2 probes).
public enum POSIXThread {
  private final class Body {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
  }

  /// Starts `body` on a new detached thread; false when no thread could be made.
  @discardableResult
  public static func start(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) -> Bool {
    let box = Unmanaged.passRetained(Body(body)).toOpaque()
    var attr = pthread_attr_t()
    pthread_attr_init(&attr)
    defer { pthread_attr_destroy(&attr) }
    pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
    if let stackSize { pthread_attr_setstacksize(&attr, stackSize) }
    var tid = pthread_t()
    let rc = pthread_create(
      &tid, &attr,
      { arg in
        guard let arg else { return nil }
        Unmanaged<Body>.fromOpaque(arg).takeRetainedValue().run()
        return nil
      }, box)
    if rc != 0 { Unmanaged<Body>.fromOpaque(box).release() }
    return rc == 0
  }
}
