"""The relying party's state: its database, the metadata statements, what tests queued; the UAF and out-of-band
services mixed in."""
import sqlite3
import threading
import time

from .oob import OutOfBandService
from .uaf import UafService
from .verify import load_metadata


class RP(UafService, OutOfBandService):
    def __init__(self, args):
        self.args = args
        # None: no statements loaded, every accepted AAID goes; else a registration needs its AAID's statement.
        self.statements = load_metadata(args.metadata) if args.metadata else None
        self.registered = []  # what each accepted registration's assertion said (GET /_admin/registration-facts)
        self.db = sqlite3.connect(args.db, check_same_thread=False)
        self.lock = threading.Lock()
        self.faults = []  # queued (status, delay) answers for tests
        self.registration_stalls = []  # seconds to wait after a registration was taken, before answering it
        self.store_holds = 0  # registrations to hold between their check and their store (store_registration)
        self.held = {}  # username -> (release, stored): a held registration's gates
        self.device_faults = []  # the same, for the dispatch-target and device services only
        self.last_signature = None  # the last Device-Signature accepted (tests replay it)
        self.next_target_ids = []  # ids the next created dispatch targets get (tests: ids outside the unreserved set)
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS challenges(server_data TEXT PRIMARY KEY, op TEXT, username TEXT,
              challenge TEXT, expires REAL, used INTEGER, tx TEXT, upv TEXT, session TEXT);
            CREATE TABLE IF NOT EXISTS registrations(username TEXT, aaid TEXT, key_id TEXT, public_key BLOB,
              key_encoding INTEGER, counter INTEGER, device_id TEXT, PRIMARY KEY(aaid, key_id));
            CREATE TABLE IF NOT EXISTS tokens(token TEXT PRIMARY KEY, op TEXT, context TEXT, redeemed INTEGER,
              session TEXT, expires REAL, target_id TEXT, created REAL, channel TEXT, dispatch_info TEXT,
              payload TEXT);
            CREATE TABLE IF NOT EXISTS dispatch_targets(id TEXT PRIMARY KEY, ext_id TEXT, username TEXT, name TEXT,
              device_id TEXT, target TEXT, dispatcher TEXT, signature_key TEXT, encryption_key TEXT);
            CREATE TABLE IF NOT EXISTS seen_requests(request_id TEXT PRIMARY KEY, at REAL);
            CREATE TABLE IF NOT EXISTS sessions(id TEXT PRIMARY KEY, status TEXT, uaf_status INTEGER, username TEXT);
        """)

    @property
    def app_id(self):
        return self.args.app_id or f"{self.args.base_url}{self.args.app_id_path}"

    def sql(self, q, *a):
        with self.lock:
            cur = self.db.execute(q, a)
            self.db.commit()
            return cur.fetchall()

    def store_registration(self, username, row):
        """Stores a checked registration. Tests (POST /_admin/hold-registration-store) hold the next ones before
        their store, as a server still working on a response whose client was killed meanwhile: each is stored once
        another registration response of the same user arrives (before that one is looked at), or after 120 s."""
        with self.lock:
            gate = None
            if self.store_holds > 0:
                self.store_holds -= 1
                gate = self.held[username] = (threading.Event(), threading.Event())
        try:
            if gate is not None:
                gate[0].wait(120)
            self.sql("INSERT INTO registrations VALUES(?,?,?,?,?,?,?)", *row)
        finally:
            if gate is not None:
                with self.lock:
                    if self.held.get(username) is gate:
                        del self.held[username]
                gate[1].set()

    def release_held_store(self, username):
        """A registration response of `username` arrived: a held one of the same user is stored first."""
        with self.lock:
            gate = self.held.pop(username, None)
        if gate is not None:
            gate[0].set()
            gate[1].wait(120)

    def finish(self, session, code, username):
        if session:
            self.sql("UPDATE sessions SET status=?, uaf_status=?, username=? WHERE id=?",
                     "succeeded" if code == 1200 else "failed", code, username, session)

    def token_expired(self, token):
        rows = self.sql("SELECT expires FROM tokens WHERE token=?", token)
        return bool(rows) and rows[0][0] is not None and time.time() > rows[0][0]
