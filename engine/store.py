"""Opening and closing graph databases, with graphiti 0.31.2's Kuzu bugs worked around.

Kuzu: one database directory per bank, one owner process (a second process cannot open it,
not even read-only), a bounded buffer pool, full-text indexes created idempotently, and an
explicit close that really releases the file lock (graphiti's close is a no-op).
Neo4j: one driver for every bank; banks are group_id partitions.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import threading
import time
import weakref
from pathlib import Path

import kuzu
from graphiti_core.driver.driver import GraphDriver, GraphProvider
from graphiti_core.graph_queries import get_fulltext_indices

from memoryplus.config.paths import fsync_dir

log = logging.getLogger("memoryplus.store")
_PATCH_LOCK = threading.Lock()
OWNER_FILE = "owner.json"


class StoreError(RuntimeError):
    """A bank cannot be opened; the message says which and what to do."""


class BankLockedError(StoreError):
    pass


class WriteStoreError(StoreError):
    """A write to a bank's database failed with an I/O error: retryable (the turn is retried)."""
    errno = 5   # EIO


# ── the store's I/O fault hook (tests and `memoryplus chaos` only) ───────────────────────────
# With MEMORYPLUS_TEST_HOOKS=1 in the worker's environment, and only then, every write query of
# a Kuzu bank first reads this file in the bank storage directory: while the wall-clock time it
# holds is in the future, the write fails with WriteStoreError, and one line is appended to the
# ".hits" file beside it. Without the variable nothing is read: no user input reaches it.
TEST_STORE_FAULT_FILE = ".test-store-fault"
_WRITE_QUERY = re.compile(r"\b(CREATE|MERGE|SET|DELETE|DETACH|REMOVE|CHECKPOINT|COPY)\b", re.I)


def store_write_fault(storage_dir: Path, bank_name: str, query: str) -> None:
    """Raise WriteStoreError if the test fault hook is on for this write (see above)."""
    if os.environ.get("MEMORYPLUS_TEST_HOOKS") != "1" or not _WRITE_QUERY.search(str(query or "")):
        return
    path = storage_dir / TEST_STORE_FAULT_FILE
    try:
        until = float(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return
    if time.time() >= until:
        return
    try:
        with open(path.with_name(TEST_STORE_FAULT_FILE + ".hits"), "a") as f:
            f.write(f"{os.getpid()} {bank_name}\n")
    except OSError:
        pass
    raise WriteStoreError(f"bank {bank_name!r}: writing to its database failed: [Errno 5] "
                          f"Input/output error (injected by the store's test fault hook)")


def _owner_of(bank_dir: Path) -> tuple[int | None, str]:
    try:
        data = json.loads((bank_dir / OWNER_FILE).read_text())
        pid = int(data.get("pid"))
        os.kill(pid, 0)
        return pid, str(data.get("app", "a MemoryPlus process"))
    except (OSError, ValueError, TypeError):
        return None, ""


def _write_owner(bank_dir: Path, app: str) -> None:
    path = bank_dir / OWNER_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "app": app, "since": time.time()}))
    os.replace(tmp, path)


def _clear_owner(bank_dir: Path) -> None:
    try:
        data = json.loads((bank_dir / OWNER_FILE).read_text())
        if int(data.get("pid", -1)) == os.getpid():
            (bank_dir / OWNER_FILE).unlink()
    except (OSError, ValueError, TypeError):
        pass


class CountingMixin:
    """Counts queries: the engine reopens a bank (when idle) after a bounded number of them,
    a safety net against Kuzu's native memory growth (see kuzu_statements.py)."""
    queries: int = 0
    fault_dir: Path | None = None     # Kuzu: the bank storage directory (the I/O fault hook)
    bank_name: str = ""

    async def execute_query(self, cypher_query_, **kwargs):  # type: ignore[override]
        self.queries += 1
        if self.fault_dir is not None:
            store_write_fault(self.fault_dir, self.bank_name, cypher_query_)
        return await super().execute_query(cypher_query_, **kwargs)  # type: ignore[misc]


def open_kuzu(bank_dir: Path, bank_name: str, *, buffer_pool_mb: int, app: str) -> GraphDriver:
    from graphiti_core.driver import kuzu_driver as kd

    from memoryplus.engine.kuzu_statements import PreparedStatementsMixin

    class _Driver(CountingMixin, PreparedStatementsMixin, kd.KuzuDriver):
        pass

    bank_dir.mkdir(parents=True, exist_ok=True)
    db_path = str(bank_dir / "graph.kuzu")
    _close_leaked(bank_dir, bank_name)
    _repair_after_unclean_exit(bank_dir, bank_name, buffer_pool_mb)
    original = kuzu.Database

    def bounded(path, *a, **kw):
        # KuzuDriver takes no buffer pool size (the default is 80% of RAM).
        return original(path, buffer_pool_size=buffer_pool_mb * 1024 * 1024)

    try:
        with _PATCH_LOCK:
            kd.kuzu.Database = bounded
            try:
                import warnings
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    driver = _Driver(db=db_path, max_concurrent_queries=1)
            finally:
                kd.kuzu.Database = original
    except RuntimeError as exc:
        text = str(exc)
        if "lock" in text.lower():
            pid, owner = _owner_of(bank_dir)
            who = f"{owner}, pid {pid}" if pid else "another process"
            raise BankLockedError(
                f"bank {bank_name!r} is in use by {who}; close it or use that process "
                f"(the memoryplus command reaches a running worker by itself)") from None
        raise _damaged(bank_name, bank_dir, f"looks damaged ({text.splitlines()[0][:200]})") from None
    # graphiti 0.31.2 bug 1: add_episode(group_id=...) reads driver._database.
    driver._database = ""  # type: ignore[attr-defined]
    driver.fault_dir, driver.bank_name = bank_dir.parent, bank_name
    _OPEN_DRIVERS[_key(bank_dir)] = weakref.ref(driver)
    if not (bank_dir / CREATED_MARKER).exists():
        try:
            (bank_dir / CREATED_MARKER).write_text("")
            os.chmod(bank_dir / CREATED_MARKER, 0o600)
        except OSError:
            pass
    for path in bank_dir.glob("graph.kuzu*"):   # Kuzu creates its files 0644
        try:
            os.chmod(path, 0o600)
        except OSError:
            pass
    _write_owner(bank_dir, app)
    return driver


# ── crash-safe repair ───────────────────────────────────────────────────────────────────
REPAIR_BACKUP = "repair-backup"     # a copy of the bank taken before a repair touches it
REBUILD_DIR = "rebuild"             # a bank rebuilt from an export of its damaged database
_DONE = "complete"                  # written last: the copy in that directory is whole
# Test only: kill this process at a named point of the repair (see _test_kill_point).
TEST_KILL_IN_REPAIR_ENV = "MEMORYPLUS_TEST_KILL_IN_REPAIR"
_LEFTOVER = "Please drop or rename the table"   # Kuzu: an index half-created by a killed process


def _test_kill_point(name: str) -> None:
    """Test hook: with MEMORYPLUS_TEST_HOOKS=1 and MEMORYPLUS_TEST_KILL_IN_REPAIR=<name> or
    <name>:<seconds>, SIGKILL this process at that point of the repair (at once, or that many
    seconds later from a timer thread, i.e. in the middle of the next Kuzu call). Inert
    otherwise."""
    if os.environ.get("MEMORYPLUS_TEST_HOOKS") != "1":
        return
    want, _, delay = os.environ.get(TEST_KILL_IN_REPAIR_ENV, "").partition(":")
    if want != name:
        return
    import signal

    def kill() -> None:
        os.kill(os.getpid(), signal.SIGKILL)
    if delay:
        threading.Timer(float(delay), kill).start()
    else:
        kill()


def _copy_file(src: Path, dst: Path) -> None:
    """Copy through a temporary name, fsynced, then renamed: dst is whole or absent."""
    import shutil
    tmp = dst.with_name(dst.name + ".part")
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)
        fo.flush()
        os.fsync(fo.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, dst)


def _db_files(bank_dir: Path) -> list[Path]:
    return sorted(p for p in bank_dir.glob("graph.kuzu*") if p.is_file())


def _remove_tree(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def _take_backup(bank_dir: Path) -> Path:
    """Copy the database and its log to repair-backup/ before a repair opens them (opening
    replays the log). The marker file is written last: without it the copy is not trusted."""
    backup = bank_dir / REPAIR_BACKUP
    _remove_tree(backup)
    backup.mkdir(mode=0o700)
    files = _db_files(bank_dir)
    for i, f in enumerate(files):
        _copy_file(f, backup / f.name)
        if i == 0:
            _test_kill_point("backup")
    (backup / "files.json").write_text(json.dumps([f.name for f in files]))
    fsync_dir(backup)
    (backup / _DONE).write_text(str(time.time()))
    fsync_dir(backup)
    return backup


def _copy_backup_into(backup: Path, names: list[str], dest: Path, *, with_log: bool = True) -> None:
    """`dest` holds the backup's database files (`names`), and no other (e.g. a .shadow file
    of an interrupted checkpoint); without `with_log`, the write-ahead log is left alone."""
    for f in _db_files(dest):
        if f.name not in names and (with_log or f.name != "graph.kuzu.wal"):
            f.unlink()
    for name in names:
        if with_log or name != "graph.kuzu.wal":
            _copy_file(backup / name, dest / name)


def _restore_backup(bank_dir: Path, bank_name: str) -> bool:
    """An interrupted repair: put the bank back as it was before it (idempotent, so a kill
    during the restore is finished by the next open). Returns whether it restored."""
    backup = bank_dir / REPAIR_BACKUP
    if not backup.is_dir():
        return False
    if not (backup / _DONE).exists():     # the copy itself was interrupted: the bank is intact
        _remove_tree(backup)
        return False
    names = json.loads((backup / "files.json").read_text())
    _copy_backup_into(backup, names, bank_dir)
    fsync_dir(bank_dir)
    log.warning("bank %r: a repair after an unclean exit was interrupted; restored the copy "
                "taken before it and repairing again", bank_name)
    return True


def _drop_backup(backup: Path) -> None:
    try:
        (backup / _DONE).unlink()         # first: from here on the copy is never restored
    except FileNotFoundError:
        pass
    fsync_dir(backup)
    _remove_tree(backup)


def _finish_rebuild(bank_dir: Path, bank_name: str) -> None:
    """Swap in a rebuilt database whose build finished; drop an unfinished build."""
    rebuild = bank_dir / REBUILD_DIR
    if not rebuild.is_dir():
        return
    if (rebuild / _DONE).exists():
        for f in _db_files(bank_dir):
            if f.name != "graph.kuzu":
                f.unlink()
        if (rebuild / "graph.kuzu").exists():
            os.replace(rebuild / "graph.kuzu", bank_dir / "graph.kuzu")
            fsync_dir(bank_dir)
            log.warning("bank %r: rebuilt from an export of its damaged database", bank_name)
    _remove_tree(rebuild)


def _fulltext_indexes() -> list[tuple[str, str, str]]:
    """(table, index, create statement) of graphiti's full-text indexes: constant names."""
    out = []
    for create in get_fulltext_indices(GraphProvider.KUZU):
        m = re.search(r"CREATE_FTS_INDEX\(\s*'(\w+)'\s*,\s*'(\w+)'", create)
        if m is not None:
            out.append((m.group(1), m.group(2), create))
    return out


class _Damaged(Exception):
    """The database opens but one of its indexes cannot be rebuilt in place."""


def _repair_after_unclean_exit(bank_dir: Path, bank_name: str, buffer_pool_mb: int) -> None:
    """Make a bank consistent before it is opened; safe against a kill at any point.

    1. Rebuild the full-text indexes of a bank whose last owner died with writes not yet
       checkpointed (kill -9, out of memory, power loss). Kuzu 0.11.3 replays the write-ahead
       log on the next open but leaves its FTS indexes inconsistent: keyword search misses
       episodes, and deleting an Episodic node crashes the process with a segmentation
       fault. Dropping and recreating the indexes after the replay fixes both. The marker: a
       non-empty WAL while the owner recorded in owner.json is gone.
    2. That repair is itself crash-safe: the database and its log are copied to
       `repair-backup/` first; a process killed while the indexes are dropped or half
       created (which left Kuzu with index tables it can neither drop nor recreate, or
       `Cannot find table catalog entry`) leaves the copy, and the next open restores it and
       repairs again. The copy is deleted only after the checkpoint.
    3. A bank damaged that way by an older version (an index missing and impossible to
       create) is rebuilt: exported with Kuzu's EXPORT DATABASE, imported into a fresh
       database, indexes created, then swapped in (also crash-safe: rebuild/ is used only
       once complete).
    """
    _finish_rebuild(bank_dir, bank_name)
    _check_files(bank_dir, bank_name)
    if not (bank_dir / "graph.kuzu").exists():
        _remove_tree(bank_dir / REPAIR_BACKUP)
        return                                     # a new bank
    if _owner_of(bank_dir)[0] not in (None, os.getpid()):
        return  # a live process holds it: its files are not ours to judge
    restored = _restore_backup(bank_dir, bank_name)
    wal = bank_dir / "graph.kuzu.wal"
    try:
        unclean = restored or (wal.exists() and wal.stat().st_size > 0)
    except OSError:
        unclean = False
    if not unclean and (bank_dir / INDEXES_CHECKED).exists():
        return          # a clean bank whose indexes were checked once: nothing to do
    t0 = time.monotonic()
    backup = _take_backup(bank_dir) if unclean else None
    if backup is not None:
        _replay_log_safely(bank_dir, bank_name, buffer_pool_mb, backup)
    try:
        _check_and_repair(bank_dir, bank_name, buffer_pool_mb, rebuild_indexes=unclean)
    except _Damaged as exc:
        _rebuild(bank_dir, bank_name, buffer_pool_mb, str(exc))   # StoreError: keep the copy
    except RuntimeError as exc:
        text = str(exc)
        if _is_lock_error(text):
            if backup is not None:
                _drop_backup(backup)    # nothing was changed: the files are the copy
            return                      # open_kuzu reports the lock properly
        _rebuild(bank_dir, bank_name, buffer_pool_mb, f"it fails with: {text.splitlines()[0][:200]}")
    try:
        (bank_dir / INDEXES_CHECKED).write_text("")
    except OSError:
        pass
    if backup is not None:
        _test_kill_point("before_backup_removed")
        _drop_backup(backup)
        log.warning("bank %r: rebuilt its full-text indexes after an unclean exit (%.2f s)",
                    bank_name, time.monotonic() - t0)


CREATED_MARKER = "kuzu-created"   # written once the bank's database exists
# Written once a clean bank's full-text indexes were found whole (banks an interrupted repair
# of an older version damaged are found and rebuilt on their first open); the check then runs
# only after an unclean exit.
INDEXES_CHECKED = "indexes-checked"


def _damaged(bank_name: str, bank_dir: Path, what: str) -> StoreError:
    return StoreError(
        f"bank {bank_name!r} cannot be opened: its database at {bank_dir} {what}. Its memories "
        f"cannot be read; to go on, move that directory away or clear the bank (\"Clear bank…\" "
        f"in the memory browser), and it starts empty; then import an export of the bank if you "
        f"have one (`memoryplus import`)")


def _check_files(bank_dir: Path, bank_name: str) -> None:
    """Refuse, with a clear message, a bank whose database file is gone or emptied: Kuzu would
    silently start an empty database there (and drop a log without its database)."""
    if (bank_dir / REPAIR_BACKUP / _DONE).exists():
        return                                     # the copy is restored below
    db, wal = bank_dir / "graph.kuzu", bank_dir / "graph.kuzu.wal"
    try:
        size = db.stat().st_size if db.exists() else None
        wal_size = wal.stat().st_size if wal.exists() else 0
    except OSError as exc:
        raise _damaged(bank_name, bank_dir, f"cannot be read ({exc.strerror or exc})") from None
    if size is None and wal_size:
        raise _damaged(bank_name, bank_dir, "has lost its file graph.kuzu (its write-ahead log is "
                                            "still there)")
    if (bank_dir / CREATED_MARKER).exists() and not size:
        raise _damaged(bank_name, bank_dir, "has lost its file graph.kuzu" if size is None
                       else "has an empty file graph.kuzu (truncated)")


UNREPLAYABLE_WAL = "unreplayable-wal"   # a log that crashed Kuzu's replay, kept for inspection
_REPLAY = ("import sys, kuzu\n"
           "db = kuzu.Database(sys.argv[1], buffer_pool_size=int(sys.argv[2]))\n"
           "conn = kuzu.Connection(db)\n"
           "conn.execute('CHECKPOINT')\n"
           "conn.close()\n"
           "db.close()\n")


def _replay_child(db_file: Path, buffer_pool_mb: int, *, crash: bool = False) -> int:
    """Open (replaying its log) and checkpoint a database in a child process; its exit code
    (negative: killed by that signal, i.e. Kuzu crashed)."""
    import sys
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH",
                                                       "VIRTUAL_ENV", "LD_LIBRARY_PATH")}
    code = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)\n" if crash else _REPLAY
    proc = subprocess.run([sys.executable, "-c", code, str(db_file), str(buffer_pool_mb * 1024 * 1024)],
                          env=env, capture_output=True, timeout=1800)
    return proc.returncode


def _replay_log_safely(bank_dir: Path, bank_name: str, buffer_pool_mb: int, backup: Path) -> None:
    """Replay the write-ahead log of a killed owner in a child process first.

    Kuzu 0.11.3 can crash the whole process (SIGSEGV, SIGABRT) replaying a log whose last
    record a kill cut short; in the worker that is a crash loop, and the crash-loop breaker
    then stops storing for every bank. When the child crashes, the longest beginning of the
    log that replays cleanly is found by bisection (on copies, in replay-probe/) and replayed:
    every write that finished before the kill is kept, only the one in progress is dropped
    (it was never reported done, so the ingestion spool redoes it). The whole log is kept
    aside (unreplayable-wal-<time>) for inspection.
    """
    crash = (os.environ.get("MEMORYPLUS_TEST_HOOKS") == "1"
             and os.environ.get(TEST_KILL_IN_REPAIR_ENV) == "replay_crashes")   # test: a poisoned log
    try:
        rc = _replay_child(bank_dir / "graph.kuzu", buffer_pool_mb, crash=crash)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("bank %r: could not replay its log in a child process (%s); replaying here",
                    bank_name, exc)
        return
    if rc >= 0:
        return          # replayed (or an error the in-process open reports properly)
    t0 = time.monotonic()
    names = json.loads((backup / "files.json").read_text())
    wal_bytes = (backup / "graph.kuzu.wal").read_bytes() if "graph.kuzu.wal" in names else b""
    probe = bank_dir / "replay-probe"

    def replays(length: int) -> bool:
        _remove_tree(probe)
        probe.mkdir(mode=0o700)
        _copy_backup_into(backup, names, probe, with_log=False)
        (probe / "graph.kuzu.wal").write_bytes(wal_bytes[:length])
        return _replay_child(probe / "graph.kuzu", buffer_pool_mb,
                             crash=crash and length == len(wal_bytes)) == 0

    good, bad, probes = 0, len(wal_bytes), 0          # an empty log always replays
    while bad - good > 1 and probes < 40:
        mid = (good + bad) // 2
        probes += 1
        if replays(mid):
            good = mid
        else:
            bad = mid
    _remove_tree(probe)
    # The bank: the copy's database with the good part of the log, replayed here by the child.
    _copy_backup_into(backup, names, bank_dir, with_log=False)
    aside = bank_dir / f"{UNREPLAYABLE_WAL}-{int(time.time())}"
    if wal_bytes:
        _copy_file(backup / "graph.kuzu.wal", aside)
    wal = bank_dir / "graph.kuzu.wal"
    tmp = wal.with_name(wal.name + ".part")
    tmp.write_bytes(wal_bytes[:good])
    os.replace(tmp, wal)
    fsync_dir(bank_dir)
    if good and _replay_child(bank_dir / "graph.kuzu", buffer_pool_mb) != 0:
        wal.unlink(missing_ok=True)
        good = 0
    log.error("bank %r: Kuzu crashed replaying the log its last owner left when it was killed; "
              "replayed the first %d of its %d bytes (%d probes, %.1f s), the write in progress at "
              "the kill is dropped (redone from the ingestion spool); the whole log is kept in %s",
              bank_name, good, len(wal_bytes), probes, time.monotonic() - t0, aside.name)


def _is_lock_error(text: str) -> bool:
    return "could not set lock" in text.lower()


def _check_and_repair(bank_dir: Path, bank_name: str, buffer_pool_mb: int, *,
                      rebuild_indexes: bool) -> None:
    db = kuzu.Database(str(bank_dir / "graph.kuzu"), buffer_pool_size=buffer_pool_mb * 1024 * 1024)
    conn = kuzu.Connection(db)
    try:
        tables = {r[0] for r in conn.execute("CALL SHOW_TABLES() RETURN name").get_all()}
        have = {(r[0], r[1]) for r in
                conn.execute("CALL SHOW_INDEXES() RETURN table_name, index_name").get_all()}
        for table, index, create in _fulltext_indexes():
            if table not in tables:
                continue                           # graphiti creates the schema and indexes
            if rebuild_indexes and (table, index) in have:
                # names come from graphiti's constant list, never from user input
                conn.execute(f"CALL DROP_FTS_INDEX('{table}', '{index}')")
                _test_kill_point("after_drop")
            elif (table, index) in have:
                continue
            _test_kill_point("create")
            try:
                conn.execute(create)
            except RuntimeError as exc:
                if _LEFTOVER in str(exc):
                    raise _Damaged(f"index {index} of {table} cannot be recreated in place") from None
                log.warning("bank %r: recreating %s failed: %s", bank_name, index, exc)
        # A query through each index: an index whose catalog entry points at a dropped table
        # (Kuzu: "Cannot find table catalog entry with id ...") fails here, not when listed.
        for table, index, _create in _fulltext_indexes():
            if table not in tables:
                continue
            try:
                conn.execute(f"CALL QUERY_FTS_INDEX('{table}', '{index}', 'memoryplus') "
                             f"RETURN node LIMIT 1")
            except RuntimeError as exc:
                raise _Damaged(f"index {index} of {table} fails: "
                               f"{str(exc).splitlines()[0][:200]}") from None
        _test_kill_point("before_checkpoint")
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
        db.close()


def _rebuild(bank_dir: Path, bank_name: str, buffer_pool_mb: int, why: str) -> None:
    """Export the damaged database and import it into a fresh one with every index."""
    t0 = time.monotonic()
    rebuild = bank_dir / REBUILD_DIR
    _remove_tree(rebuild)
    rebuild.mkdir(mode=0o700)
    export = rebuild / "export"
    pool = buffer_pool_mb * 1024 * 1024
    try:
        db = kuzu.Database(str(bank_dir / "graph.kuzu"), buffer_pool_size=pool)
        conn = kuzu.Connection(db)
        try:   # the path is ours (the bank's directory), passed as a quoted literal
            conn.execute(f"EXPORT DATABASE '{_cypher_path(export)}' (format='parquet')")
        finally:
            conn.close()
            db.close()
        (export / "index.cypher").write_text("")   # the indexes are created below, cleanly
        db = kuzu.Database(str(rebuild / "graph.kuzu"), buffer_pool_size=pool)
        conn = kuzu.Connection(db)
        try:
            conn.execute(f"IMPORT DATABASE '{_cypher_path(export)}'")
            tables = {r[0] for r in conn.execute("CALL SHOW_TABLES() RETURN name").get_all()}
            for table, _index, create in _fulltext_indexes():
                if table in tables:
                    conn.execute(create)
            conn.execute("CHECKPOINT")
        finally:
            conn.close()
            db.close()
    except RuntimeError as exc:
        _remove_tree(rebuild)
        raise _damaged(bank_name, bank_dir, f"is damaged ({why[:300]}) and could not be rebuilt "
                                            f"({str(exc).splitlines()[0][:200]})") from None
    _remove_tree(export)
    fsync_dir(rebuild)
    (rebuild / _DONE).write_text(str(time.time()))
    fsync_dir(rebuild)
    _test_kill_point("rebuild_ready")
    _finish_rebuild(bank_dir, bank_name)
    log.warning("bank %r: %s; rebuilt it from an export of its data (%.2f s)", bank_name, why,
                time.monotonic() - t0)


def _cypher_path(path: Path) -> str:
    text = str(path)
    if "'" in text or "\\" in text:
        raise StoreError(f"cannot rebuild a bank under a path with quotes or backslashes: {text}")
    return text


async def checkpoint(driver: GraphDriver) -> None:
    """Flush Kuzu's write-ahead log, so that a crash after a finished write needs no replay."""
    if driver.provider == GraphProvider.KUZU:
        await driver.execute_query("CHECKPOINT")


async def ensure_fulltext_indexes(driver: GraphDriver) -> None:
    """graphiti 0.31.2 bug 2: KuzuDriver never builds its full-text indexes, and building them
    twice fails; run each statement and ignore 'already exists'."""
    for query in get_fulltext_indices(GraphProvider.KUZU):
        try:
            await driver.execute_query(query)
        except Exception as exc:  # kuzu raises RuntimeError subclasses
            if "already exists" not in str(exc):
                raise


# Kuzu locks a database against other processes only: a second kuzu.Database on the same file
# in this process opens without complaint, and the two then overwrite each other's pages. So
# every open driver is recorded, and one still open when its bank is opened again (left by an
# open that failed half way, e.g. a write error while recovering pending episodes) is closed
# first.
_OPEN_DRIVERS: dict[str, "weakref.ref[GraphDriver]"] = {}


def _key(bank_dir: Path) -> str:
    return str(bank_dir.resolve())


def _close_leaked(bank_dir: Path, bank_name: str) -> None:
    ref = _OPEN_DRIVERS.pop(_key(bank_dir), None)
    old = ref() if ref is not None else None
    if old is None or getattr(old, "closed_by_us", False):
        return
    log.warning("bank %r: closing a database handle an earlier, failed open left behind", bank_name)
    try:
        close_kuzu(old, bank_dir)
    except Exception as exc:
        log.warning("bank %r: closing the left-behind handle failed: %s", bank_name, exc)


def close_kuzu(driver: GraphDriver, bank_dir: Path) -> None:
    """Release the database and its file lock (graphiti's close() does not)."""
    driver.closed_by_us = True  # type: ignore[attr-defined]
    ref = _OPEN_DRIVERS.get(_key(bank_dir))
    if ref is not None and ref() is driver:
        del _OPEN_DRIVERS[_key(bank_dir)]
    try:
        driver.client.close()  # type: ignore[attr-defined]
    finally:
        try:
            driver.db.close()  # type: ignore[attr-defined]
        finally:
            _clear_owner(bank_dir)
            _release_freed_memory()


def _release_freed_memory() -> None:
    """Hand memory Kuzu freed back to the system (glibc keeps it in its arenas otherwise)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def open_neo4j(uri: str, user: str, password: str, database: str) -> GraphDriver:
    from graphiti_core.driver.neo4j_driver import Neo4jDriver

    class _Driver(CountingMixin, Neo4jDriver):
        pass

    try:
        driver = _Driver(uri=uri, user=user, password=password, database=database)
    except Exception as exc:
        # Never echo the password: the driver's messages name the URI only, and so do we.
        raise StoreError(f"cannot connect to Neo4j at {uri}: {type(exc).__name__}") from None
    # graphiti's constructor also schedules the index build as a task nobody awaits (its error
    # is lost, and an unreachable server leaves it pending when the loop ends): the engine
    # builds the indexes itself and awaits them.
    init = getattr(driver, "_init_task", None)
    if init is not None:
        init.cancel()
    return driver
