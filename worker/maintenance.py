"""A persistent worker's idle time: the engine's maintenance, freed heap given back to the
system, and recycling (a clean exit its owner follows with a fresh worker) after a number of
operations or past a memory bound. Freed heap is also given back between operations once it
has grown enough (trim_if_grown): a worker kept busy (an import) is never idle."""
from __future__ import annotations

import asyncio
import functools
import logging
import time

log = logging.getLogger("memoryplus.worker")


def recycle_reason(server) -> str | None:
    lim = server.limits
    if lim.recycle_after_ops and server.ops_done >= lim.recycle_after_ops:
        return f"recycling after {server.ops_done} operations"
    if lim.recycle_rss_mb and server.ops_done:   # a fresh worker never recycles
        rss = rss_mb()
        if rss > lim.recycle_rss_mb:
            return f"recycling at {rss:.0f} MB resident memory (bound {lim.recycle_rss_mb} MB)"
    return None


async def run(server) -> None:
    """Until the worker stops: when idle, maintain (exclusively), then recycle if it is time."""
    maintained_at = 0.0
    tick = max(0.05, min(0.5, server.limits.idle_s / 2))
    while not server.stopping.is_set():
        try:
            await asyncio.wait_for(server.stopping.wait(), tick)
            return
        except asyncio.TimeoutError:
            pass
        now = time.monotonic()
        if server._busy() or now - server.last_activity < server.limits.idle_s:
            continue
        # every 10 s while idle: closing idle banks (bank_pool.maintain) is due then too
        if server.last_activity > maintained_at or now - maintained_at > 10:
            maintained_at = now
            await server.gate.enter(True)
            try:
                if await server.engine.maintain():
                    log.info("maintenance reopened bank(s) whose Kuzu memory had grown")
            except Exception:
                log.exception("maintenance failed")
            finally:
                await server.gate.leave(True)
            give_back(server)
        if server._busy() or not server.accepting:
            continue
        reason = recycle_reason(server)
        if reason:
            server.begin_stop(reason, recycle=True)


def trim_if_grown(server) -> None:
    """After an operation: give freed heap back if the resident size grew the limits'
    trim_growth_mb since the last trim (the first operation only sets the mark).
    Why between operations: glibc kept ~70 MB after each 100-turn ingest on a 20,000-turn bank,
    and a worker fed without a pause (an import, the bench's ingestion) never reached its idle
    trim; a trim there takes 4-8 ms (2026-12-07)."""
    rss = rss_mb()
    if server.trimmed_rss_mb is None:
        server.trimmed_rss_mb = rss
    elif rss - server.trimmed_rss_mb >= server.limits.trim_growth_mb:
        # the embedder's table kept: the next ingest reads it again, which cost ~10% of the
        # ingest rate on a 20,000-turn bank when it was given back too
        give_back(server, table_pages=False)


def give_back(server, table_pages: bool = True) -> None:
    """return_free_memory, counted in the worker's health and marked for trim_if_grown."""
    server.memory_returned_mb += return_free_memory(table_pages)
    server.trimmed_rss_mb = rss_mb()


def return_free_memory(table_pages: bool = True) -> float:
    """Give the heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing),
    and the offline embedder's table pages if `table_pages` (read again from the page cache
    when needed).
    An ingest frees much of what it allocated, but glibc keeps it: ~65 MB after 100 turns on a
    5,000-turn bank, for ~9 ms of work once idle. Returns the MB the resident size fell by."""
    from memoryplus.engine.embedders import release_table_pages
    before = rss_mb()
    if table_pages:
        release_table_pages()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    return max(0.0, before - rss_mb())


@functools.lru_cache(maxsize=1)     # looked up once: maintenance calls it on every idle round
def _malloc_trim():
    try:
        import ctypes
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def rss_mb() -> float:
    try:
        import psutil
        return psutil.Process().memory_info().rss / 1048576
    except Exception:
        return 0.0
