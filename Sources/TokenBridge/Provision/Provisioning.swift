import Dispatch
import FoundationEssentials
import Platform
import Synchronization
import TokenDevices

/// `tokenbridge provision`: a desk's batch of tokens enrolled for a list of users, side by side, resumable from its
/// journal. The front end parses the options and renders events and the report; everything else is here.
public struct Provisioning {
  public var planPath: String
  public var journalPath: String
  public var recipient: String?
  /// The one current PIN of every token that has its own (`--pin-fd`); wiped by the caller.
  public var currentPIN: [UInt8]?
  public var parallel: Int?
  public var server: String?
  public var facetID: String?
  public var configuration: Configuration
  public var dataDirectory: URL = Configuration.dataDirectory
  /// `--wait`: once the tokens present are worked, tokens plugged in later take the rows still without one, until
  /// every row has one or this many seconds pass without a token arriving.
  public var waitSeconds: Double?

  /// Tokens worked at once at most, whatever `--parallel` or the number of tokens.
  public static let maxParallel = 32

  public init(planPath: String, journalPath: String, configuration: Configuration) {
    self.planPath = planPath
    self.journalPath = journalPath
    self.configuration = configuration
  }

  /// The whole run: plan → journal → (nothing when every row is done) → tokens assigned → refusals checked before
  /// any token is changed → every assigned row worked, `parallel` at a time → the report, from the journal.
  public func run(emit: @escaping @Sendable (ProvisionEvent) -> Void) throws(OperationError) -> ProvisionReport {
    if let p = parallel, !(1...Self.maxParallel).contains(p) {
      throw .provision(.parallel(p, maximum: Self.maxParallel))
    }
    let bytes: [UInt8]
    do { bytes = try RegularFile.read(planPath, limit: ProvisionPlan.maxBytes) } catch { throw .input(error) }
    let plan: ProvisionPlan
    do { plan = try ProvisionPlan(csv: bytes) } catch { throw .provision(.plan(error)) }
    guard let server = server ?? configuration.server else { throw .configuration(.noServer) }
    let journal = try provision { () throws(ProvisionError) in try ProvisionJournal(path: journalPath) }
    let nonce = try provision { () throws(ProvisionError) in try journal.begin(plan, server: server) }
    var rows = try provision { () throws(ProvisionError) in try journal.rows() }
    // A finished journal: nothing is asked of any token or server.
    if rows.allSatisfy({ $0.stage == .done }) { return ProvisionReport(rows: rows, unused: []) }

    let env = try UAFEnvironment(configuration: configuration, dataDirectory: dataDirectory)
    let listing = try TokenListing(trace: nil)
    let unused = try assign(&rows, tokens: listing.tokens, journal: journal, emit: emit)
    let present = Set(listing.tokens.flatMap { $0.ids ?? [$0.id] })
    let work = rows.filter { $0.stage != .done && $0.stage != .pending && present.contains($0.sideID ?? "") }
    for r in rows where r.stage != .done && !work.contains(where: { $0.row.number == r.row.number }) {
      emit(.init(event: .pending, row: r.row.number, username: r.row.username, token: r.sideID, message: nil))
    }
    try refuse(work, tokens: listing.tokens)
    let sealer = try recipient.map { r throws(OperationError) in
      try provision { () throws(ProvisionError) in try PinSealer(recipient: r) }
    }
    let context = ProvisionContext(
      journal: journal, nonce: nonce, configuration: configuration, dataDirectory: dataDirectory, server: server,
      facetID: facetID, sealer: sealer, currentPIN: currentPIN, timeout: configuration.interactionTimeout, emit: emit)
    // A row a killed run left registering: the newest registration of its user that a run left pending on its token
    // (kept by the local data however many runs or other processes opened it since), or one the run had confirmed
    // locally when it was killed, before its journal said so.
    let registered = (try? env.localData.authenticators()) ?? []
    let tasks = work.map { r in
      let mine: (AuthenticatorRecord) -> Bool = {
        $0.tokenID == r.sideID && ($0.username == r.row.username || r.row.payload != nil)
      }
      var candidate: AuthenticatorRecord? = nil
      if r.stage == .registering {
        let left = (try? env.localData.interruptedRegistrations(tokenID: r.sideID ?? "")) ?? []
        candidate = (left.filter(mine) + registered.filter { mine($0) && $0.server == server })
          .max { $0.createdAt < $1.createdAt }
      }
      var w = ProvisionWork(row: r, interrupted: candidate)
      w.cardReaders = Self.cardReaders(of: r.sideID, in: listing.tokens)
      return w
    }
    Self.runAll(tasks, parallel: min(parallel ?? tasks.count, Self.maxParallel), context: context)
    var after = try provision { () throws(ProvisionError) in try journal.rows() }
    for r in after where r.stage == .done && work.contains(where: { $0.row.number == r.row.number }) {
      emit(.init(event: .done, row: r.row.number, username: r.row.username, token: r.sideID, message: r.keyID))
    }
    var unusedNow = unused
    if let seconds = waitSeconds {
      (after, unusedNow) = try late(seconds: seconds, known: Set(listing.tokens.map(\.id)), context: context)
    }
    return ProvisionReport(rows: after, unused: unusedNow)
  }

  /// `--wait`: rows without a token take tokens plugged in meanwhile (each worked as it comes, as the first ones
  /// were), until none is left without one or `seconds` pass without an arrival. A late token that needs what the
  /// run was not given (`--pin-recipient`, `--pin-fd`) fails its row alone: the rows already done stand. Returns the
  /// journal's rows and the tokens no row took.
  func late(seconds: Double, known: Set<String>, context: ProvisionContext) throws(OperationError) -> (
    [ProvisionJournalRow], [String]
  ) {
    let journal = context.journal
    let emit = context.emit
    var seen = known
    var deadline = DispatchTime.now() + seconds
    var unused: [String] = []
    var told = 0  // the number of rows last said to wait: said again only when it changes
    while true {
      var rows = try provision { () throws(ProvisionError) in try journal.rows() }
      let waiting = rows.filter { $0.stage == .pending }
      guard !waiting.isEmpty else { return (rows, unused) }
      let arrival = TokenArrival()  // before the listing: a token that comes while it runs is not missed
      let tokens = (try? TokenListing(trace: nil).tokens) ?? []
      let fresh = tokens.filter { !seen.contains($0.id) }
      if fresh.isEmpty {
        if waiting.count != told {
          emit(.init(event: .waiting, row: nil, username: nil, token: nil, message: "\(waiting.count)"))
          told = waiting.count
        }
        // Events first, a look again every 3 s besides (one arrival gives no PC/SC event: `TokenWait`).
        let relook = DispatchTime.now() + 3
        if !arrival.wait(until: min(deadline, relook)) && DispatchTime.now() >= deadline { return (rows, unused) }
        continue
      }
      seen.formUnion(fresh.map(\.id))
      let before = Set(rows.filter { $0.stage == .pending }.map(\.row.number))
      unused += try assign(&rows, tokens: fresh, journal: journal, emit: emit)
      let work = rows.filter { before.contains($0.row.number) && $0.stage == .assigned }
      var tasks: [ProvisionWork] = []
      for r in work {
        do { try refuse([r], tokens: fresh) } catch {
          let report = ErrorReport(error)
          try? journal.fail(r.row.number, code: Int(report.status.rawValue), message: report.message)
          emit(
            .init(event: .failed, row: r.row.number, username: r.row.username, token: r.sideID, message: report.message)
          )
          continue
        }
        var w = ProvisionWork(row: r, interrupted: nil)
        w.cardReaders = Self.cardReaders(of: r.sideID, in: fresh)
        tasks.append(w)
      }
      Self.runAll(tasks, parallel: min(parallel ?? tasks.count, Self.maxParallel), context: context)
      let done = try provision { () throws(ProvisionError) in try journal.rows() }
      for r in done where r.stage == .done && tasks.contains(where: { $0.row.row.number == r.row.number }) {
        emit(.init(event: .done, row: r.row.number, username: r.row.username, token: r.sideID, message: r.keyID))
      }
      deadline = DispatchTime.now() + seconds
    }
  }

  /// Where the listing saw the token side `id`: a card's reader, or no reader for a FIDO2 key (nil: not listed).
  static func cardReaders(of id: String?, in tokens: [TokenInfo]) -> Set<String>? {
    guard let side = tokens.flatMap(\.sides).first(where: { $0.id == id }) else { return nil }
    if side.kind == .fido2 { return [] }
    return side.reader.map { [$0] }
  }

  /// Works `tasks`, `parallel` at once, each on a thread of its own (token I/O blocks; the work is waiting, not
  /// computing), and returns when all are done.
  static func runAll(_ tasks: [ProvisionWork], parallel: Int, context: ProvisionContext) {
    guard !tasks.isEmpty else { return }
    let next = Mutex(0)
    // Takes the next task and runs it, until none is left (each worker thread, and this one after them).
    let drain: @Sendable () -> Void = {
      while true {
        let i = next.withLock { n -> Int in
          defer { n += 1 }
          return n
        }
        guard i < tasks.count else { return }
        tasks[i].run(context)
      }
    }
    let group = DispatchGroup()
    for _ in 0..<max(1, min(parallel, tasks.count)) {
      group.enter()
      let started = POSIXThread.start {
        drain()
        group.leave()
      }
      if !started {
        group.leave()
      }
    }
    group.wait()
    // A thread that could not be made leaves its share to the others; none made at all: the work runs here.
    drain()
  }

  /// Gives each row without a token one: rows naming a serial first (the token with that serial or id), then the
  /// others in plan order (the first free token of the row's kind). A token a row had before keeps it; a token of a
  /// done row is never taken again. Returns the tokens no row took (left alone, listed).
  func assign(
    _ rows: inout [ProvisionJournalRow], tokens: [TokenInfo], journal: ProvisionJournal,
    emit: @Sendable (ProvisionEvent) -> Void
  ) throws(OperationError) -> [String] {
    var taken = Set(rows.compactMap(\.tokenID))
    func free(_ match: (TokenInfo) -> Bool) -> TokenInfo? {
      tokens.first { !taken.contains($0.id) && match($0) }
    }
    func side(_ t: TokenInfo, _ kind: TokenKind?) -> TokenInfo? {
      let sides = t.sides
      if let kind { return sides.first { $0.kind == kind } }
      // One physical token with both: its FIDO2 key (no management key needed; as `enroll` prefers).
      return sides.first { $0.kind == .fido2 } ?? sides.first
    }
    for pass in [true, false] {
      for i in rows.indices where rows[i].stage == .pending && (rows[i].row.serial != nil) == pass {
        let r = rows[i].row
        let match: (TokenInfo) -> Bool = { t in
          if let s = r.serial, !(t.serial.map(String.init) == s || t.isNamed(s)) { return false }
          return side(t, r.kind) != nil
        }
        guard let token = free(match), let chosen = side(token, r.kind) else { continue }
        taken.insert(token.id)
        let shown = token.serial.map(String.init) ?? chosen.id
        try provision { () throws(ProvisionError) in
          try journal.assign(r.number, tokenID: token.id, sideID: chosen.id, shownSerial: shown)
        }
        rows[i].tokenID = token.id
        rows[i].sideID = chosen.id
        rows[i].shownSerial = shown
        rows[i].stage = .assigned
        emit(.init(event: .assigned, row: r.number, username: r.username, token: chosen.id, message: nil))
      }
    }
    let unused = tokens.filter { !taken.contains($0.id) }.map(\.id)
    for t in unused { emit(.init(event: .unusedToken, row: nil, username: nil, token: t, message: nil)) }
    return unused
  }

  /// Before any token is changed: a token at its factory PIN needs `--pin-recipient`, one with its own PIN needs
  /// `--pin-fd` (as far as the listing tells; a PIV card without GET METADATA is found out by its row's work).
  func refuse(_ work: [ProvisionJournalRow], tokens: [TokenInfo]) throws(OperationError) {
    var needRecipient: [String] = []
    var needPIN: [String] = []
    for r in work where r.stage == .assigned {
      guard let side = tokens.flatMap(\.sides).first(where: { $0.id == r.sideID }) else { continue }
      let factory: Bool?
      if side.kind == .fido2 {
        factory = side.fido2.map { !$0.pinIsSet }
      } else {
        factory = side.pin?.isDefault
      }
      if factory == true && recipient == nil { needRecipient.append(side.id) }
      if factory == false && currentPIN == nil { needPIN.append(side.id) }
    }
    if !needRecipient.isEmpty { throw .provision(.recipientNeeded(tokens: needRecipient)) }
    if !needPIN.isEmpty { throw .provision(.currentPINNeeded(tokens: needPIN)) }
  }
}
