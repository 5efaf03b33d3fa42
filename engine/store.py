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
import threading
import time
import weakref
from pathlib import Path

import kuzu
from graphiti_core.driver.driver import GraphDriver, GraphProvider

from memoryplus.engine.errors import BankLockedError, StoreError, WriteStoreError
from memoryplus.engine.kuzu_repair import (
    CREATED_MARKER, INDEXES_CHECKED, compact_if_grown, damaged, database, graphiti_fulltext_indexes,
    is_address_space_error, repair_after_unclean_exit)

log = logging.getLogger("memoryplus.store")
_PATCH_LOCK = threading.Lock()
OWNER_FILE = "owner.json"


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


# a query that may change the graph (a rollback undoes writes): what the bank's caches of
# graph rows go by (graph_index.py, SearchOps' user facts)
WRITE = re.compile(r"\b(CREATE|MERGE|SET|DELETE|DETACH|REMOVE|COPY|ROLLBACK)\b", re.I)


class CountingMixin:
    """Counts queries: the engine reopens a bank (when idle) after a bounded number of them,
    a safety net against Kuzu's native memory growth (see kuzu_statements.py). Also counts
    the writes, before they run: a cache filled at one count is stale at any other."""
    queries: int = 0
    writes: int = 0
    fault_dir: Path | None = None     # Kuzu: the bank storage directory (the I/O fault hook)
    bank_name: str = ""

    @property
    def observers(self) -> list:
        """Called with each query that ran, and its parameters (engine/graph_index.py)."""
        return self.__dict__.setdefault("_observers", [])

    async def execute_query(self, cypher_query_, **kwargs):  # type: ignore[override]
        self.queries += 1
        if WRITE.search(str(cypher_query_)):
            self.writes += 1
        if self.fault_dir is not None:
            store_write_fault(self.fault_dir, self.bank_name, cypher_query_)
        result = await super().execute_query(cypher_query_, **kwargs)  # type: ignore[misc]
        for observe in self.observers:
            observe(cypher_query_, kwargs)
        return result


# Kuzu 0.11.3's checkpoint needs buffer pool in proportion to the database: a 9,550-turn bank
# (665 MB on disk) failed every checkpoint with "the buffer pool is full" at 256 MB and passed
# at 384 MB. So a bank's pool is the setting or, when the bank is bigger, this share of its
# file plus a margin (the pool is a bound, not an allocation: only the pages used are resident).
POOL_SHARE_OF_FILE = 0.75
POOL_MARGIN_MB = 64


def file_mb(bank_dir: Path) -> float:
    try:
        return (bank_dir / "graph.kuzu").stat().st_size / 1048576
    except OSError:
        return 0.0


def pool_mb_for(bank_dir: Path, setting_mb: int) -> int:
    """The buffer pool a bank opens with: the setting, or more for a big bank (see above),
    never over half the machine's memory."""
    need = int(POOL_MARGIN_MB + POOL_SHARE_OF_FILE * file_mb(bank_dir))
    try:
        half_ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2 // 1048576
    except (ValueError, OSError, AttributeError):
        half_ram = 1 << 20
    return max(setting_mb, min(need, half_ram))


# A bank is reopened with a bigger pool once the pool its file now asks for is this much
# bigger than the one it was opened with: each reopen then grows the pool by a quarter at
# least (not once per written part), and a checkpoint still has room (it failed at a file of
# ~1.9 times the pool: 128 MB full at 240 MB, 2026-12-06).
OUTGROWN_BY = 1.25


def outgrown(driver: GraphDriver, bank_dir: Path, setting_mb: int) -> bool:
    """Whether a Kuzu bank has grown past the pool it was opened with (reopen it when
    nothing uses it: bank_pool.BankPool.bank_to_write, maintain)."""
    pool = getattr(driver, "pool_mb", None)
    return pool is not None and pool_mb_for(bank_dir, setting_mb) > OUTGROWN_BY * pool


QUERIES_AT_ONCE = 1     # a bank's connection runs one query at a time (bank_pool.py's locking)


def open_kuzu(bank_dir: Path, bank_name: str, *, buffer_pool_mb: int, app: str) -> GraphDriver:
    from graphiti_core.driver import kuzu_driver as kd

    from memoryplus.engine.kuzu_schema import LeanSchemaMixin
    from memoryplus.engine.kuzu_statements import PreparedStatementsMixin

    class _Driver(CountingMixin, LeanSchemaMixin, PreparedStatementsMixin, kd.KuzuDriver):
        pass

    bank_dir.mkdir(parents=True, exist_ok=True)
    db_path = str(bank_dir / "graph.kuzu")
    _close_leaked(bank_dir, bank_name)
    setting_mb, buffer_pool_mb = buffer_pool_mb, pool_mb_for(bank_dir, buffer_pool_mb)
    owner = _owner_of(bank_dir)[0]
    repair_after_unclean_exit(bank_dir, bank_name, buffer_pool_mb, owner)
    if owner in (None, os.getpid()) and compact_if_grown(bank_dir, bank_name, buffer_pool_mb):
        buffer_pool_mb = pool_mb_for(bank_dir, setting_mb)      # the smaller file's
    original = kuzu.Database

    def bounded(path, *a, **kw):
        # KuzuDriver takes no buffer pool size (the default is 80% of RAM) nor address space
        return database(path, buffer_pool_mb)

    try:
        with _PATCH_LOCK:
            kd.kuzu.Database = bounded
            try:
                import warnings
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    driver = _Driver(db=db_path, max_concurrent_queries=QUERIES_AT_ONCE)
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
        if is_address_space_error(text):
            raise StoreError(
                f"bank {bank_name!r} cannot be opened now: this process could not reserve memory "
                f"for its database ({text.splitlines()[0][:200]}); its data is untouched. Close "
                f"other banks or programs and try again") from None
        raise damaged(bank_name, bank_dir, f"looks damaged ({text.splitlines()[0][:200]})") from None
    # graphiti 0.31.2 bug 1: add_episode(group_id=...) reads driver._database.
    driver._database = ""  # type: ignore[attr-defined]
    driver.fault_dir, driver.bank_name = bank_dir.parent, bank_name
    driver.pool_mb = buffer_pool_mb  # type: ignore[attr-defined]
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


async def checkpoint(driver: GraphDriver) -> None:
    """Flush Kuzu's write-ahead log, so that a crash after a finished write needs no replay."""
    if driver.provider == GraphProvider.KUZU:
        await driver.execute_query("CHECKPOINT")


async def create_fulltext_index(driver: GraphDriver, create: str) -> None:
    """Run a CREATE_FTS_INDEX statement; one that exists already is left as it is."""
    try:
        await driver.execute_query(create)
    except Exception as exc:  # kuzu raises RuntimeError subclasses
        if "already exists" not in str(exc):
            raise


async def add_graphiti_fulltext_indexes(driver: GraphDriver, bank_dir: Path,
                                        tables=("Entity", "RelatesToNode_")) -> None:
    """graphiti's own full-text indexes of `tables`, for stock graphiti's searches (the
    bench's and tests' baselines): a bank keeps none (kuzu_repair.py), and graphiti 0.31.2's
    KuzuDriver never builds them (bug 2). The bank drops them at its next open."""
    for table, _index, create in graphiti_fulltext_indexes():
        if table in tables:
            await create_fulltext_index(driver, create)
    (bank_dir / INDEXES_CHECKED).unlink(missing_ok=True)


async def ensure_turn_vectors(driver: GraphDriver) -> None:
    """The column each turn's vectors are kept in (turn_index.pack_vectors); an older bank
    gains it when it opens (Neo4j needs no column)."""
    if driver.provider == GraphProvider.KUZU:
        await driver.execute_query("ALTER TABLE Episodic ADD IF NOT EXISTS turn_vectors STRING")


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


def _forget(driver: GraphDriver, bank_dir: Path) -> None:
    """The driver is closed: not one left behind to close at the bank's next open."""
    driver.closed_by_us = True  # type: ignore[attr-defined]
    ref = _OPEN_DRIVERS.get(_key(bank_dir))
    if ref is not None and ref() is driver:
        del _OPEN_DRIVERS[_key(bank_dir)]


def close_kuzu(driver: GraphDriver, bank_dir: Path) -> None:
    """Release the database and its file lock (graphiti's close() does not)."""
    _forget(driver, bank_dir)
    try:
        _close_handles(driver)
    finally:
        _clear_owner(bank_dir)
        _release_freed_memory()


def _close_handles(driver: GraphDriver) -> None:
    """Close the bank's connection, then its database (which releases the file lock)."""
    try:
        driver.client.close()  # type: ignore[attr-defined]
    finally:
        driver.db.close()  # type: ignore[attr-defined]


# Kuzu keeps every page it read or wrote in its buffer pool until the pool is full, and gives
# none back while the database is open: after an import of 2,000 turns, or the first search
# of a big bank (which reads every vector column into our indexes), the pages stay resident
# though our indexes answer from then on. Reopening the database in place gives them back
# (in process, a 2,000-turn bank just imported and searched: +114 -> +79 MB, ~150 ms).
# Worth it once a bank may hold this many MB of pages it no longer needs (bank_pool.maintain).
RELEASE_PAGES_MB = 16


def reopen_in_place(driver: GraphDriver, bank_dir: Path) -> None:
    """Close a Kuzu bank's database and open it again in the same driver, with the same pool
    bound: Kuzu gives back the pages its pool held (see RELEASE_PAGES_MB). The caller has
    flushed the bank and holds it (no query under way). If it cannot open again (another
    process took the file meanwhile), the driver is left closed and StoreError raised: the
    caller drops the bank, whose next use opens it anew."""
    driver.__dict__.pop("_statements", None)     # prepared on the connection that closes
    _close_handles(driver)
    try:                                # (the worker's idle round trims the heap after)
        driver.db = database(bank_dir / "graph.kuzu", driver.pool_mb)  # type: ignore[attr-defined]
        driver.client = kuzu.AsyncConnection(driver.db, max_concurrent_queries=QUERIES_AT_ONCE)  # type: ignore[attr-defined]
    except RuntimeError as exc:
        _forget(driver, bank_dir)
        _clear_owner(bank_dir)
        raise StoreError(f"bank {driver.bank_name!r} could not be opened again "  # type: ignore[attr-defined]
                         f"({str(exc).splitlines()[0][:200]}); its next use opens it anew") from None


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
