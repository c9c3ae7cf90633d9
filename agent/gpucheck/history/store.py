"""The history store: every run gpucheck was given, in one SQLite file on the admin node (docs/history.md).

One transaction per run (BEGIN IMMEDIATE): a run is there whole or not at all, whatever kills its writer, and
writers queue behind each other. A command that only reads opens the file read-only (`reading=True`) and creates
or changes no file: the store keeps a rollback journal, which only a writer makes (a WAL store makes every reader
create its -wal and -shm files). The schema is versioned (PRAGMA user_version) and
migrated forward when a newer gpucheck opens the file; a file made by a newer gpucheck, or that is not ours
(PRAGMA application_id), is refused. Names that repeat in every run (figure names, checks, versions, GPU
identities) are kept once and referred to by number: a year of daily runs of 1,000 8-GPU nodes stays small."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import time
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..files import user_state_dir
from ..redact import clean, redact
from .diff import is_rate
from .records import CLUSTER, NotAReport, Run

APPLICATION_ID = 0x67706368  # "gpch": this file is a gpucheck history store
BUSY_S = 120.0  # how long a writer waits for another one's transaction before giving up
ENV = "GPUCHECK_HISTORY"  # where the store is when --history is not given
# A node's baseline until one is set: its first run that passed (or only warned) with GPU figures (a --full run)
FIRST_BASELINE = "its first passing run with GPU figures"

# MIGRATIONS[i] takes a store from schema version i to i + 1. Never edit one that has shipped: add the next.
MIGRATIONS: tuple[tuple[str, ...], ...] = ((
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('node', 'cluster')),
        started TEXT NOT NULL,
        recorded TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
        source TEXT NOT NULL,
        digest TEXT NOT NULL UNIQUE,
        exit_code INTEGER,
        gpucheck_version TEXT,
        complete INTEGER NOT NULL)""",
    """CREATE TABLE node_runs (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        node TEXT NOT NULL,
        started TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT,
        profile TEXT,
        report BLOB)""",
    "CREATE INDEX runs_by_started ON runs (started)",
    "CREATE INDEX node_runs_by_node ON node_runs (node, started)",
    "CREATE INDEX node_runs_by_run ON node_runs (run_id)",
    """CREATE TABLE gpu_ids (
        id INTEGER PRIMARY KEY, uuid TEXT, pci_bus_id TEXT, name TEXT,
        UNIQUE (uuid, pci_bus_id, name))""",
    """CREATE TABLE gpus (
        node_run_id INTEGER NOT NULL REFERENCES node_runs (id) ON DELETE CASCADE,
        gpu INTEGER NOT NULL,
        gpu_id INTEGER NOT NULL REFERENCES gpu_ids (id),
        PRIMARY KEY (node_run_id, gpu)) WITHOUT ROWID""",
    "CREATE INDEX gpus_by_id ON gpus (gpu_id)",
    "CREATE TABLE checks (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    """CREATE TABLE results (
        node_run_id INTEGER NOT NULL REFERENCES node_runs (id) ON DELETE CASCADE,
        check_id INTEGER NOT NULL REFERENCES checks (id),
        status TEXT NOT NULL,
        reason TEXT,
        PRIMARY KEY (node_run_id, check_id)) WITHOUT ROWID""",
    """CREATE TABLE names (
        id INTEGER PRIMARY KEY, check_name TEXT NOT NULL, figure TEXT NOT NULL, unit TEXT NOT NULL,
        UNIQUE (check_name, figure))""",
    """CREATE TABLE figures (
        node_run_id INTEGER NOT NULL REFERENCES node_runs (id) ON DELETE CASCADE,
        name_id INTEGER NOT NULL REFERENCES names (id),
        gpu INTEGER NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (node_run_id, name_id, gpu)) WITHOUT ROWID""",
    """CREATE TABLE version_ids (
        id INTEGER PRIMARY KEY, what TEXT NOT NULL, version TEXT NOT NULL, UNIQUE (what, version))""",
    """CREATE TABLE versions (
        node_run_id INTEGER NOT NULL REFERENCES node_runs (id) ON DELETE CASCADE,
        version_id INTEGER NOT NULL REFERENCES version_ids (id),
        PRIMARY KEY (node_run_id, version_id)) WITHOUT ROWID""",
    """CREATE TABLE baselines (
        node TEXT PRIMARY KEY,
        node_run_id INTEGER NOT NULL REFERENCES node_runs (id) ON DELETE CASCADE,
        since TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
        how TEXT NOT NULL)""",
), (
    # 2: the store's cluster: one store per cluster (a lab's node01 is not a production node01)
    "CREATE TABLE about (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
), (
    # 3: a node's state changes (docs/watch.md): detected, drained, held, returned; at: UTC, as every time here
    """CREATE TABLE transitions (
        node_run_id INTEGER NOT NULL REFERENCES node_runs (id) ON DELETE CASCADE, state TEXT NOT NULL,
        node TEXT NOT NULL,
        at TEXT NOT NULL, path TEXT NOT NULL, reason TEXT NOT NULL, gpus TEXT NOT NULL,
        PRIMARY KEY (node_run_id, state)) WITHOUT ROWID""",
    "CREATE INDEX transitions_by_node ON transitions (node, at)",
),)
SCHEMA_VERSION = len(MIGRATIONS)


class HistoryError(Exception):
    """The store cannot be used (not ours, newer, unreadable): one line for the user."""


CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Where gpucheck before one store per cluster kept every cluster's runs in one file (beside STORES_DIR)
SHARED_STORE = "history.sqlite"
STORES_DIR = "history"


def cluster_name(text: str) -> str:
    """A cluster's name as a store is named after it; HistoryError for one that cannot name a file."""
    if not CLUSTER_NAME.fullmatch(text):
        raise HistoryError(f"cluster name {text!r} cannot name a history store: letters, digits, '.', '_' and '-', "
                           "64 at most, starting with a letter or digit")
    return text


def default_path(environ: Mapping[str, str] | None = None, cluster: str | None = None) -> Path:
    """$GPUCHECK_HISTORY; else cluster's own store, <state directory>/history/<cluster>.sqlite; without a cluster,
    the only store there is. HistoryError when that leaves none, or more than one, or a store shared by every
    cluster (from before) would be left behind unsaid. RuntimeError when there is no home for the state directory."""
    env = os.environ if environ is None else environ
    if env.get(ENV):
        return Path(env[ENV])
    state = user_state_dir(env)
    shared = state / SHARED_STORE
    if cluster is not None:
        path = state / STORES_DIR / f"{cluster_name(cluster)}.sqlite"
        if shared.exists() and not path.exists():
            raise HistoryError(f"{shared} holds runs from before gpucheck kept one store per cluster: `mv {shared} "
                               f"{path}` makes them cluster {cluster}'s, or move it away")
        return path
    stores = sorted((state / STORES_DIR).glob("*.sqlite"))
    if len(stores) == 1:
        return stores[0]
    if stores:
        names = ", ".join(p.stem for p in stores)
        raise HistoryError(f"{state / STORES_DIR} holds the stores of clusters {names}: name one with --cluster")
    if shared.exists():
        raise HistoryError(f"{shared} holds runs from before gpucheck kept one store per cluster: move it to "
                           f"{state / STORES_DIR}/<cluster>.sqlite, named after the inventory's cluster_name")
    raise HistoryError(f"no history store in {state / STORES_DIR} yet (`gpucheck cluster` or `gpucheck history "
                       "import` makes one, named after the inventory's cluster_name)")


class Store:
    """An open history store. Use as a context manager, or close()."""

    def __init__(self, path: Path, create: bool = True, reading: bool = False):
        self.path = path
        if (reading or not create) and not path.exists():
            raise HistoryError(f"no history store at {path} (`gpucheck history import` or `gpucheck cluster` makes "
                               "one)")
        self.ids: dict[tuple[str, tuple], int] = {}  # interned names of committed transactions
        if reading:
            self.open_to_read()
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, timeout=BUSY_S, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise HistoryError(f"cannot open the history store {path}: {exc}") from None
        try:
            self.rollback_journal()
            self.db.execute("PRAGMA foreign_keys=ON")
            self.migrate()
        except sqlite3.OperationalError as exc:
            self.db.close()
            raise HistoryError(f"cannot use the history store {path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise HistoryError(f"{path}: not a gpucheck history store ({exc})") from None
        except HistoryError:
            self.db.close()
            raise

    def open_to_read(self) -> None:
        """Read-only, the schema checked and never migrated: reading changes nothing, not even a journal."""
        try:
            self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_S,
                                      isolation_level=None)
            header = (self.db.execute("PRAGMA application_id").fetchone()[0],
                      self.db.execute("PRAGMA user_version").fetchone()[0])
        except (OSError, sqlite3.Error) as exc:
            with contextlib.suppress(AttributeError):
                self.db.close()
            raise HistoryError(f"cannot read the history store {self.path}: {exc}") from None
        if header == (APPLICATION_ID, SCHEMA_VERSION):
            return
        self.db.close()
        if header[0] != APPLICATION_ID:
            raise HistoryError(f"{self.path}: an SQLite file that is not a gpucheck history store")
        newer = header[1] > SCHEMA_VERSION
        raise HistoryError(f"{self.path}: made by {'a newer' if newer else 'an older'} gpucheck (schema {header[1]}; "
                           f"this one reads {SCHEMA_VERSION}): " + ("use that gpucheck" if newer else
                           "the next `gpucheck cluster` or `gpucheck history import` brings it up to date"))

    def rollback_journal(self) -> None:
        """A rollback journal, which the file keeps (a store an older gpucheck made in WAL mode is switched back).
        Switching takes the file to itself and SQLite does not wait for that (no busy handler): another process
        opening the store at the same moment is waited for here."""
        deadline = time.monotonic() + BUSY_S
        while True:
            try:
                self.db.execute("PRAGMA journal_mode=DELETE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        known = dict(self.ids)
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            self.ids = known  # ids handed out in the rolled-back transaction do not exist
            raise
        self.db.execute("COMMIT")

    def migrate(self) -> None:
        """Brings the file to this schema; a store already there is only read."""
        header = (self.db.execute("PRAGMA application_id").fetchone()[0],
                  self.db.execute("PRAGMA user_version").fetchone()[0])
        if header == (APPLICATION_ID, SCHEMA_VERSION):
            return
        with self.transaction() as db:  # checked again: another process may have migrated it meanwhile
            version = db.execute("PRAGMA user_version").fetchone()[0]
            app = db.execute("PRAGMA application_id").fetchone()[0]
            tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if app != APPLICATION_ID and (app or tables):
                raise HistoryError(f"{self.path}: an SQLite file that is not a gpucheck history store")
            if version > SCHEMA_VERSION:
                raise HistoryError(f"{self.path}: made by a newer gpucheck (schema {version}; this one knows up to "
                                   f"{SCHEMA_VERSION}): use that gpucheck")
            for step in MIGRATIONS[version:]:
                for statement in step:
                    db.execute(statement)
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def intern(self, table: str, columns: tuple[str, ...], values: tuple) -> int:
        key = (table, values)
        if key not in self.ids:
            where = " AND ".join(f"{c} IS ?" for c in columns)
            row = self.db.execute(f"SELECT id FROM {table} WHERE {where}", values).fetchone()
            if row is None:
                marks = ", ".join("?" for _ in columns)
                row = (self.db.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                                       values).lastrowid,)
            self.ids[key] = row[0]
        return self.ids[key]

    def record(self, run: Run, source: str) -> tuple[int, bool]:
        """(run id, True) once the run is kept; (its id, False) when the same report was recorded before. Every way
        into the store comes here, so here every text a node wrote is redacted (redact.py), as the cluster report's."""
        source = redact(source)
        try:
            return self._record(run, source)
        except (OverflowError, sqlite3.InterfaceError, sqlite3.ProgrammingError) as exc:  # rolled back, nothing kept
            raise NotAReport(f"a value no record can hold ({exc})") from None

    @property
    def cluster(self) -> str | None:
        """The cluster whose runs this store keeps (None until a run that names one is recorded)."""
        row = self.db.execute("SELECT value FROM about WHERE key = 'cluster'").fetchone()
        return row[0] if row else None

    def _claim(self, db: sqlite3.Connection, run: Run) -> None:
        """The store is the cluster's its first named run names; a run of another cluster is refused whole."""
        if run.cluster is None:
            return
        kept = self.cluster
        if kept is None:
            db.execute("INSERT INTO about (key, value) VALUES ('cluster', ?)", (run.cluster,))
        elif kept != run.cluster:
            raise HistoryError(f"{self.path} keeps the runs of cluster {kept}, and this one is of cluster "
                               f"{run.cluster}: each cluster has a store of its own (--cluster, --store, ${ENV})")

    def _record(self, run: Run, source: str) -> tuple[int, bool]:
        with self.transaction() as db:
            row = db.execute("SELECT id FROM runs WHERE digest = ?", (run.digest,)).fetchone()
            if row:
                return row[0], False
            self._claim(db, run)
            run_id = db.execute(
                "INSERT INTO runs (kind, started, source, digest, exit_code, gpucheck_version, complete) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", (run.kind, run.started, source, run.digest, run.exit_code,
                                                 run.gpucheck_version, int(run.complete))).lastrowid
            for part in run.nodes:
                report = None if part.report is None else clean(part.report)
                blob = None if report is None else zlib.compress(json.dumps(report, default=str).encode())
                node_run = db.execute(
                    "INSERT INTO node_runs (run_id, node, started, status, reason, profile, report) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (run_id, part.node, run.started, part.status, part.reason and redact(part.reason),
                     part.profile, blob)).lastrowid
                db.executemany("INSERT OR REPLACE INTO gpus VALUES (?, ?, ?)", [
                    (node_run, index, self.intern("gpu_ids", ("uuid", "pci_bus_id", "name"), (uuid, bus, name)))
                    for index, uuid, bus, name in part.gpus])
                db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)", [
                    (node_run, self.intern("checks", ("name",), (check,)), status, reason and redact(reason))
                    for check, status, reason in part.results])
                db.executemany("INSERT OR REPLACE INTO figures VALUES (?, ?, ?, ?)", [
                    (node_run, self.intern("names", ("check_name", "figure", "unit"), (check, name, unit)), gpu, value)
                    for check, name, unit, gpu, value in part.figures])
                db.executemany("INSERT OR REPLACE INTO transitions VALUES (?, ?, ?, ?, ?, ?, ?)", [
                    (node_run, state, part.node, at, path, redact(reason), gpus)
                    for at, state, path, reason, gpus in part.transitions])
                db.executemany("INSERT OR IGNORE INTO versions VALUES (?, ?)", [
                    (node_run, self.intern("version_ids", ("what", "version"), item))
                    for item in sorted(part.versions.items())])
                if part.node != CLUSTER and part.status in ("pass", "warn") and any(
                        is_rate(f"{check} {name}") for check, name, *_ in part.figures):
                    # the earliest such run, whatever order reports are imported in; never over one set by hand
                    db.execute("""INSERT INTO baselines (node, node_run_id, how) VALUES (?, ?, ?)
                                  ON CONFLICT (node) DO UPDATE SET node_run_id = excluded.node_run_id
                                  WHERE baselines.how = excluded.how AND ? < (
                                      SELECT started FROM node_runs WHERE id = baselines.node_run_id)""",
                               (part.node, node_run, FIRST_BASELINE, run.started))
            return run_id, True

    def set_baseline(self, node: str, node_run: int, how: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO baselines (node, node_run_id, how) VALUES (?, ?, ?)",
                       (node, node_run, how))

    def query(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        cursor = self.db.execute(sql, params)
        columns = [c[0] for c in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor]
