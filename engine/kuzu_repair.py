"""Crash-safe repair of a Kuzu bank before it is opened (see repair_after_unclean_exit), and
the files that mark a bank's state beside its database.

Kuzu 0.11.3 can crash replaying a log a kill cut short, and an older version's banks have
full-text indexes (which Kuzu left inconsistent after replaying a killed owner's log) and the
damage an interrupted repair of theirs could leave: each is dealt with here, and each repair
survives a kill at any point (tests/test_store_repair.py kills it at each). A healthy bank
whose file has grown with the pages its checkpoints left behind is compacted the same way
(compact_if_grown; tests/test_store_compaction.py).
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import kuzu
from graphiti_core.driver.driver import GraphProvider
from graphiti_core.graph_queries import get_fulltext_indices

from memoryplus.common.python_child import run_python
from memoryplus.config.paths import fsync_dir
from memoryplus.engine.errors import StoreError
from memoryplus.engine.stopwords import STOPWORDS_TABLE

log = logging.getLogger("memoryplus.store")

REPAIR_BACKUP = "repair-backup"     # a copy of the bank taken before a repair touches it
REBUILD_DIR = "rebuild"             # a bank rebuilt from an export of its data (damaged, or compacted)
_DONE = "complete"                  # written last: the copy in that directory is whole
# Test only: kill this process at a named point of the repair (see _test_kill_point).
TEST_KILL_IN_REPAIR_ENV = "MEMORYPLUS_TEST_KILL_IN_REPAIR"
# The address space a Kuzu database reserves (its largest possible file). Kuzu's default, 8 TiB,
# lets a process open only 15 databases before mmap fails (47-bit address space): the 16th
# bank of a worker would not open. A bank of 20,000 turns is ~1 GB; 256 GiB leaves ~500 banks.
MAX_DB_BYTES = 1 << 38
_DATABASE = kuzu.Database       # Kuzu's own: store.open_kuzu patches kuzu.Database to call us


def database(path: Path | str, buffer_pool_mb: int, *, read_only: bool = False) -> kuzu.Database:
    """A Kuzu database as every bank is opened: bounded buffer pool and address space."""
    return _DATABASE(str(path), buffer_pool_size=buffer_pool_mb * 1024 * 1024, max_db_size=MAX_DB_BYTES,
                     read_only=read_only)


def is_address_space_error(text: str) -> bool:
    """Kuzu could not reserve memory for a database: the process, not the bank, is at fault."""
    return "mmap for size" in text.lower()


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
    """Swap in a rebuilt database whose build finished (a damaged bank's, or a compacted
    one); drop an unfinished build."""
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
            log.info("bank %r: swapped in its database rebuilt from an export of its data", bank_name)
    _remove_tree(rebuild)


# A Kuzu bank has no full-text index. graphiti's searches of facts and entities by words are
# answered by the word index (word_index.py), and nothing searches its turns or communities by
# words. Kuzu's indexes cost an open bank 33 MB (of 64 MB: ~12 MB each and 8 MB for their
# stop-word table), an index update per write, and they were what an unclean exit left
# inconsistent. An older bank's are dropped by its first check here (INDEXES_CHECKED).


def graphiti_fulltext_indexes() -> list[tuple[str, str, str]]:
    """(table, index, create statement) of graphiti's full-text indexes: constant names."""
    out = []
    for create in get_fulltext_indices(GraphProvider.KUZU):
        m = re.search(r"CREATE_FTS_INDEX\(\s*'(\w+)'\s*,\s*'(\w+)'", create)
        if m is not None:
            out.append((m.group(1), m.group(2), create))
    return out


class _Damaged(Exception):
    """The database opens but one of its indexes cannot be dropped in place."""


def repair_after_unclean_exit(bank_dir: Path, bank_name: str, buffer_pool_mb: int,
                              owner_pid: int | None) -> None:
    """Make a bank consistent before it is opened; safe against a kill at any point.
    `owner_pid`: the live process owner.json names (store.py), if any.

    1. A bank whose last owner died with writes not yet checkpointed (kill -9, out of
       memory, power loss; the marker: a non-empty WAL while the owner recorded in
       owner.json is gone) has its log replayed in a child process first (Kuzu can crash
       replaying it), then is checked as below and checkpointed.
    2. Checked once (INDEXES_CHECKED), and after each unclean exit: the full-text indexes an
       older version kept (Kuzu left them inconsistent after a replay: keyword search missed
       turns, deleting one crashed the process) are dropped with their stop-word table.
    3. That repair is itself crash-safe: the database and its log are copied to
       `repair-backup/` first; a process killed meanwhile leaves the copy, and the next
       open restores it and repairs again. The copy is deleted only after the checkpoint.
    4. A bank whose index cannot be dropped (an older version's interrupted repair could
       leave `Cannot find table catalog entry`) or that fails otherwise is rebuilt: exported
       with Kuzu's EXPORT DATABASE, imported into a fresh database, then swapped in (also
       crash-safe: rebuild/ is used only once complete).
    """
    _finish_rebuild(bank_dir, bank_name)
    _check_files(bank_dir, bank_name)
    if not (bank_dir / "graph.kuzu").exists():
        _remove_tree(bank_dir / REPAIR_BACKUP)
        return                                     # a new bank
    if owner_pid not in (None, os.getpid()):
        return  # a live process holds it: its files are not ours to judge
    restored = _restore_backup(bank_dir, bank_name)
    wal = bank_dir / "graph.kuzu.wal"
    try:
        unclean = restored or (wal.exists() and wal.stat().st_size > 0)
    except OSError:
        unclean = False
    if not unclean and (bank_dir / INDEXES_CHECKED).exists():
        return          # a clean bank checked once (its full-text indexes dropped): nothing to do
    t0 = time.monotonic()
    backup = _take_backup(bank_dir) if unclean else None
    if backup is not None:
        _replay_log_safely(bank_dir, bank_name, buffer_pool_mb, backup)
    try:
        _check_and_repair(bank_dir, bank_name, buffer_pool_mb)
    except _Damaged as exc:
        _rebuild(bank_dir, bank_name, buffer_pool_mb, str(exc))   # StoreError: keep the copy
    except RuntimeError as exc:
        text = str(exc)
        if _is_lock_error(text) or is_address_space_error(text):
            if backup is not None:
                _drop_backup(backup)    # nothing was changed: the files are the copy
            return                      # open_kuzu reports either properly
        _rebuild(bank_dir, bank_name, buffer_pool_mb, f"it fails with: {text.splitlines()[0][:200]}")
    try:
        (bank_dir / INDEXES_CHECKED).write_text("")
    except OSError:
        pass
    if backup is not None:
        _test_kill_point("before_backup_removed")
        _drop_backup(backup)
        log.warning("bank %r: repaired after an unclean exit (%.2f s)", bank_name,
                    time.monotonic() - t0)


CREATED_MARKER = "kuzu-created"   # written once the bank's database exists
# Written once a bank's full-text indexes were dropped (or found absent: banks an interrupted
# repair of an older version damaged are rebuilt on their first open); the check then runs only
# after an unclean exit. A new name: banks that kept two indexes under the old one
# ("indexes-checked") are checked once more.
INDEXES_CHECKED = "no-fulltext-indexes"


def damaged(bank_name: str, bank_dir: Path, what: str) -> StoreError:
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
        raise damaged(bank_name, bank_dir, f"cannot be read ({exc.strerror or exc})") from None
    if size is None and wal_size:
        raise damaged(bank_name, bank_dir, "has lost its file graph.kuzu (its write-ahead log is "
                                            "still there)")
    if (bank_dir / CREATED_MARKER).exists() and not size:
        raise damaged(bank_name, bank_dir, "has lost its file graph.kuzu" if size is None
                       else "has an empty file graph.kuzu (truncated)")


CHILD_TIMEOUT_S = 1800                  # a child replaying a log, or exporting and importing a bank
UNREPLAYABLE_WAL = "unreplayable-wal"   # a log that crashed Kuzu's replay, kept for inspection
_REPLAY = ("import sys, kuzu\n"
           f"db = kuzu.Database(sys.argv[1], buffer_pool_size=int(sys.argv[2]), max_db_size={MAX_DB_BYTES})\n"
           "conn = kuzu.Connection(db)\n"
           "conn.execute('CHECKPOINT')\n"
           "conn.close()\n"
           "db.close()\n")


def _replay_child(db_file: Path, buffer_pool_mb: int, *, crash: bool = False) -> int:
    """Open (replaying its log) and checkpoint a database in a child process; its exit code
    (negative: killed by that signal, i.e. Kuzu crashed)."""
    code = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)\n" if crash else _REPLAY
    return run_python(code, [str(db_file), str(buffer_pool_mb * 1024 * 1024)], env=_child_env(),
                      timeout=CHILD_TIMEOUT_S).returncode


def _child_env() -> dict[str, str]:
    """A child's environment: what finds the interpreter and its libraries, this process's
    import path, and graphiti's telemetry off."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "VIRTUAL_ENV",
                                                       "LD_LIBRARY_PATH", "TMPDIR", "SYSTEMROOT")}
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path if p and os.path.exists(p))
    env["GRAPHITI_TELEMETRY_ENABLED"] = "false"
    return env


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


def _check_and_repair(bank_dir: Path, bank_name: str, buffer_pool_mb: int) -> None:
    """Drop the full-text indexes (and their stop-word table) an older bank has; one that
    cannot be dropped (its catalog entry points at a dropped table, Kuzu refuses) makes the
    bank one to rebuild (_Damaged)."""
    db = database(bank_dir / "graph.kuzu", buffer_pool_mb)
    conn = kuzu.Connection(db)
    try:
        have = {(r[0], r[1]) for r in
                conn.execute("CALL SHOW_INDEXES() RETURN table_name, index_name").get_all()}
        for table, index, _create in graphiti_fulltext_indexes():
            if (table, index) not in have:
                continue
            try:    # names come from graphiti's constant list, never from user input
                conn.execute(f"CALL DROP_FTS_INDEX('{table}', '{index}')")
            except RuntimeError as exc:
                raise _Damaged(f"index {index} of {table} cannot be dropped: "
                               f"{str(exc).splitlines()[0][:200]}") from None
            _test_kill_point("after_drop")
        conn.execute("CALL enable_internal_catalog=true")
        tables = {r[0] for r in conn.execute("CALL SHOW_TABLES() RETURN name").get_all()}
        if STOPWORDS_TABLE in tables:
            conn.execute(f"DROP TABLE {STOPWORDS_TABLE}")
        conn.execute("CALL enable_internal_catalog=false")
        _test_kill_point("before_checkpoint")
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
        db.close()


def _rebuild(bank_dir: Path, bank_name: str, buffer_pool_mb: int, why: str) -> None:
    """Export the damaged database and import it into a fresh one with every index."""
    t0 = time.monotonic()
    try:
        _export_import(bank_dir, buffer_pool_mb)
    except RuntimeError as exc:
        _remove_tree(bank_dir / REBUILD_DIR)
        raise damaged(bank_name, bank_dir, f"is damaged ({why[:300]}) and could not be rebuilt "
                                            f"({str(exc).splitlines()[0][:200]})") from None
    _mark_rebuilt(bank_dir)
    _finish_rebuild(bank_dir, bank_name)
    log.warning("bank %r: %s; rebuilt it from an export of its data (%.2f s)", bank_name, why,
                time.monotonic() - t0)


def _export_import(bank_dir: Path, buffer_pool_mb: int, *, compacting: bool = False) -> tuple[dict, dict]:
    """Export the bank's database with Kuzu's EXPORT DATABASE and import it into a fresh one
    in rebuild/ (not yet complete: _mark_rebuilt), in a child process (_in_child): an import
    of a 20,000-turn bank took ~230 MB in the process that ran it, ~70 MB of which its heap
    kept after malloc_trim, for good in a worker. When `compacting` a healthy bank, it is
    only read, and the rows of each table are counted before and after. RuntimeError when
    either fails or the child dies."""
    _test_kill_point("compacting")
    before, after = _in_child("_export_import_here", str(bank_dir), buffer_pool_mb, compacting)
    return before, after


def _export_import_here(bank_dir: str, buffer_pool_mb: int, compacting: bool) -> tuple[dict, dict]:
    """_export_import's work, in this process."""
    rebuild = Path(bank_dir) / REBUILD_DIR
    _remove_tree(rebuild)
    rebuild.mkdir(mode=0o700)
    export = rebuild / "export"
    db = database(Path(bank_dir) / "graph.kuzu", buffer_pool_mb, read_only=compacting)
    conn = kuzu.Connection(db)
    try:   # the path is ours (the bank's directory), passed as a quoted literal
        before = _row_counts(conn) if compacting else {}
        conn.execute(f"EXPORT DATABASE '{_cypher_path(export)}' (format='parquet')")
    finally:
        conn.close()
        db.close()
    (export / "index.cypher").write_text("")   # a bank keeps no full-text index
    db = database(rebuild / "graph.kuzu", buffer_pool_mb)
    conn = kuzu.Connection(db)
    try:
        conn.execute(f"IMPORT DATABASE '{_cypher_path(export)}'")
        conn.execute("CHECKPOINT")
        after = _row_counts(conn) if compacting else {}
    finally:
        conn.close()
        db.close()
    _remove_tree(export)
    return before, after


# The child dies with its parent (Linux's PR_SET_PDEATHSIG), set before anything else it does,
# or leaves if its parent died before that.
_CHILD = ("import os, sys\n"
          "if sys.platform.startswith('linux'):\n"
          "    import ctypes, signal\n"
          "    ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
          "if os.getppid() != int(sys.argv[1]):\n"
          "    os._exit(1)\n"
          "from memoryplus.engine import kuzu_repair\n"
          "kuzu_repair._child_main()\n")


def _in_child(function: str, *args):
    """This module's `function(*args)` (JSON in and out) run by a child Python with this
    process's import path; its result, or RuntimeError with the child's error, or when it died
    or took over CHILD_TIMEOUT_S. The child dies with this process (Linux): a worker killed
    meanwhile leaves nothing holding the bank's file. In a frozen PyGPT the child is PyGPT's
    own executable (common/python_child.py)."""
    try:
        proc = run_python(_CHILD, [str(os.getpid())], env=_child_env(), timeout=CHILD_TIMEOUT_S,
                          input=json.dumps({"function": function, "args": args}).encode())
    except subprocess.TimeoutExpired:
        raise RuntimeError("Kuzu's child process took too long") from None
    try:        # its last line: anything a library printed comes before
        answer = json.loads((proc.stdout.decode(errors="replace").strip().splitlines() or ["null"])[-1])
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "result" in answer:
        return answer["result"]
    if isinstance(answer, dict) and "error" in answer:
        raise RuntimeError(answer["error"])
    raise RuntimeError(f"Kuzu's child process ended with exit code {proc.returncode}")


def _child_main() -> None:
    """_in_child's child: reads the call from stdin, answers on stdout."""
    call = json.loads(sys.stdin.read())
    try:
        answer = {"result": globals()[call["function"]](*call["args"])}
    except (RuntimeError, OSError) as exc:
        answer = {"error": str(exc) or type(exc).__name__}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")


def _row_counts(conn: kuzu.Connection) -> dict[str, int]:
    out = {}
    for _id, table, kind, *_ in conn.execute("CALL show_tables() RETURN *").get_all():
        pattern = f"(:`{table}`)" if kind == "NODE" else f"()-[:`{table}`]->()"
        out[table] = conn.execute(f"MATCH {pattern} RETURN count(*)").get_next()[0]
    return out


def _mark_rebuilt(bank_dir: Path) -> None:
    """The rebuilt database is whole: from here on it replaces the bank's (_finish_rebuild)."""
    rebuild = bank_dir / REBUILD_DIR
    fsync_dir(rebuild)
    (rebuild / _DONE).write_text(str(time.time()))
    fsync_dir(rebuild)
    _test_kill_point("rebuild_ready")


# Kuzu 0.11.3 has no VACUUM (kuzudb/kuzu#4798), and a checkpoint writes the column chunks that
# grew anew, keeping the old pages: the bench's bank took 18 KB a turn on disk at 20,000 turns
# (360 MB) and 83 MB once exported and imported; a bank flushed every 10 turns, 36 KB a turn at
# 2,000. The buffer pool is sized to the file (store.pool_mb_for), and the worker's memory
# grows with the pages a checkpoint writes. So a bank whose file has grown to COMPACT_GROWTH
# times its size after the last compaction is rebuilt the same crash-safe way as a damaged one.
COMPACTED_MARKER = "compacted-mb"     # the file's size (MB) after its last compaction
COMPACT_MIN_MB = 64
COMPACT_GROWTH = 2.0


def compact_if_grown(bank_dir: Path, bank_name: str, buffer_pool_mb: int) -> bool:
    """Rebuild a closed, flushed Kuzu bank from an export of its data when its file has grown
    (above); True when it was. Every table must hold as many rows after as before, or the
    bank is left as it was. The caller holds the bank closed; another process holding it, or
    any failure, leaves it as it was (logged)."""
    db_file, wal = bank_dir / "graph.kuzu", bank_dir / "graph.kuzu.wal"
    try:
        mb = db_file.stat().st_size / 1048576
        if wal.exists() and wal.stat().st_size > 0:
            return False            # writes not checkpointed: the repair's business at open
    except OSError:
        return False
    if mb < COMPACT_MIN_MB or mb < COMPACT_GROWTH * _compacted_mb(bank_dir):
        return False
    t0 = time.monotonic()
    try:
        before, after = _export_import(bank_dir, buffer_pool_mb, compacting=True)
    except (RuntimeError, OSError) as exc:
        _remove_tree(bank_dir / REBUILD_DIR)
        text = str(exc)
        if _is_lock_error(text) or is_address_space_error(text):
            return False                    # not now: tried at the next open
        _record_compacted(bank_dir, mb)     # tried again when it has grown as much again
        log.warning("bank %r: could not compact its database (%s); it is unchanged", bank_name,
                    text.splitlines()[0][:200] if text else type(exc).__name__)
        return False
    if before != after:
        _remove_tree(bank_dir / REBUILD_DIR)
        _record_compacted(bank_dir, mb)
        log.warning("bank %r: its compacted copy did not hold the same rows (%s against %s); "
                    "the bank is unchanged", bank_name, after, before)
        return False
    _mark_rebuilt(bank_dir)
    _finish_rebuild(bank_dir, bank_name)
    new_mb = db_file.stat().st_size / 1048576
    _record_compacted(bank_dir, new_mb)
    log.info("bank %r: compacted its database from %.0f to %.0f MB (%.2f s)", bank_name, mb,
             new_mb, time.monotonic() - t0)
    return True


def _compacted_mb(bank_dir: Path) -> float:
    try:
        return float((bank_dir / COMPACTED_MARKER).read_text())
    except (OSError, ValueError):
        return 0.0


def _record_compacted(bank_dir: Path, mb: float) -> None:
    try:
        (bank_dir / COMPACTED_MARKER).write_text(f"{mb:.1f}")
    except OSError:
        pass


def _cypher_path(path: Path) -> str:
    text = str(path)
    if "'" in text or "\\" in text:
        raise StoreError(f"cannot rebuild a bank under a path with quotes or backslashes: {text}")
    return text
