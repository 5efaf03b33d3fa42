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
from pathlib import Path

import kuzu
from graphiti_core.driver.driver import GraphDriver, GraphProvider
from graphiti_core.graph_queries import get_fulltext_indices

log = logging.getLogger("memoryplus.store")
_PATCH_LOCK = threading.Lock()
OWNER_FILE = "owner.json"


class StoreError(RuntimeError):
    """A bank cannot be opened; the message says which and what to do."""


class BankLockedError(StoreError):
    pass


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
    """Counts parameterized queries: Kuzu's native memory grows with each one, so the engine
    reopens a bank (when idle) after a bounded number of them."""
    queries: int = 0

    async def execute_query(self, cypher_query_, **kwargs):  # type: ignore[override]
        self.queries += 1
        return await super().execute_query(cypher_query_, **kwargs)  # type: ignore[misc]


def open_kuzu(bank_dir: Path, bank_name: str, *, buffer_pool_mb: int, app: str) -> GraphDriver:
    from graphiti_core.driver import kuzu_driver as kd

    class _Driver(CountingMixin, kd.KuzuDriver):
        pass

    bank_dir.mkdir(parents=True, exist_ok=True)
    db_path = str(bank_dir / "graph.kuzu")
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
        raise StoreError(f"bank {bank_name!r} cannot be opened: its database at {bank_dir} "
                         f"looks damaged ({text.splitlines()[0][:200]}); restore it from an "
                         f"export, or clear the bank") from None
    # graphiti 0.31.2 bug 1: add_episode(group_id=...) reads driver._database.
    driver._database = ""  # type: ignore[attr-defined]
    for path in bank_dir.glob("graph.kuzu*"):   # Kuzu creates its files 0644
        try:
            os.chmod(path, 0o600)
        except OSError:
            pass
    _write_owner(bank_dir, app)
    return driver


def _repair_after_unclean_exit(bank_dir: Path, bank_name: str, buffer_pool_mb: int) -> None:
    """Rebuild the full-text indexes of a bank whose last owner died with writes not yet
    checkpointed (kill -9, out of memory, power loss).

    Kuzu 0.11.3 replays the write-ahead log on the next open but leaves its FTS indexes
    inconsistent: keyword search misses episodes, and deleting an Episodic node (forget, the
    recovery of a pending episode) crashes the process with a segmentation fault. Dropping and
    recreating the indexes after the replay fixes both. The marker: a non-empty WAL while the
    owner recorded in owner.json is gone (a clean close checkpoints and empties the log).
    """
    wal = bank_dir / "graph.kuzu.wal"
    try:
        if not wal.exists() or wal.stat().st_size == 0:
            return
    except OSError:
        return
    if _owner_of(bank_dir)[0] not in (None, os.getpid()):
        return  # a live process holds it: its log is not ours to judge
    t0 = time.monotonic()
    try:
        db = kuzu.Database(str(bank_dir / "graph.kuzu"), buffer_pool_size=buffer_pool_mb * 1024 * 1024)
    except RuntimeError:
        return  # locked or damaged: open_kuzu reports it properly
    conn = kuzu.Connection(db)
    try:
        for create in get_fulltext_indices(GraphProvider.KUZU):
            m = re.search(r"CREATE_FTS_INDEX\(\s*'(\w+)'\s*,\s*'(\w+)'", create)
            if m is None:
                continue
            try:  # names come from graphiti's constant list, never from user input
                conn.execute(f"CALL DROP_FTS_INDEX('{m.group(1)}', '{m.group(2)}')")
            except RuntimeError:
                pass  # absent: a bank that never got its indexes
            try:
                conn.execute(create)
            except RuntimeError as exc:
                log.warning("bank %r: recreating %s failed: %s", bank_name, m.group(2), exc)
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
        db.close()
    log.warning("bank %r: rebuilt its full-text indexes after an unclean exit (%.2f s)",
                bank_name, time.monotonic() - t0)


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


def close_kuzu(driver: GraphDriver, bank_dir: Path) -> None:
    """Release the database and its file lock (graphiti's close() does not)."""
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
        return _Driver(uri=uri, user=user, password=password, database=database)
    except Exception as exc:
        # Never echo the password: the driver's messages name the URI only, and so do we.
        raise StoreError(f"cannot connect to Neo4j at {uri}: {type(exc).__name__}") from None
