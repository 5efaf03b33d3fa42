"""A Kuzu bank whose file has grown with the pages its checkpoints left behind is compacted
(engine/kuzu_repair.compact_if_grown): smaller on disk, with the same rows and answers, and
whole after a kill at any point of it.

Real Kuzu on disk and the real engine. Each turn is flushed on its own, as a chat's turns are:
that is what leaves old pages behind (40 such turns take ~30 MB, ~6 MB once compacted).
COMPACT_MIN_MB is lowered so that a test-sized bank qualifies.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from memoryplus.engine import kuzu_repair
from memoryplus.engine.kuzu_repair import COMPACTED_MARKER, REBUILD_DIR, TEST_KILL_IN_REPAIR_ENV
from memoryplus.wire.records import Turn

BANK = "compact"
N = 40
CITIES = ("Lisbon", "Osaka", "Quito", "Tromso", "Dakar", "Hobart", "Lviv")
HOBBIES = ("chess", "pottery", "sailing", "birdwatching", "baking", "climbing")
QUESTIONS = ("Where does Orla7 live?", "Who loves pottery?", "Which friend moved to Quito?",
             "Tell me about Orla12", "Who likes sailing and lives in Hobart?")


def _turn(i: int) -> Turn:
    return Turn(id=f"t{i}", user=f"My friend Orla{i} moved to {CITIES[i % 7]} and loves {HOBBIES[i % 6]}.",
                assistant="Noted.")


@pytest.fixture
def small_banks_compact(monkeypatch):
    monkeypatch.setattr(kuzu_repair, "COMPACT_MIN_MB", 0)


def _db(data: Path) -> Path:
    return next((data / "kuzu").glob("*/graph.kuzu"))


async def _answers(eng) -> list:
    return [[(r.id, r.text, round(r.score, 6)) for r in await eng.search(BANK, q, limit=10)]
            for q in QUESTIONS]


async def _grown_bank(make_engine, data: Path, **settings) -> tuple[object, list]:
    """An open engine over a bank of N turns, each flushed on its own, and its answers."""
    eng = make_engine(directory=data, **settings)
    for i in range(N):
        report = await eng.ingest(BANK, [_turn(i)])
        assert report.stored == [f"t{i}"]
    return eng, await _answers(eng)


async def test_a_grown_bank_is_compacted_when_it_opens_and_answers_as_before(
        make_engine, tmp_path, small_banks_compact):
    data = tmp_path / "data"
    eng, before = await _grown_bank(make_engine, data)
    await eng.close()
    grown = _db(data).stat().st_size

    eng = make_engine(directory=data)
    assert (await eng.stats(BANK)).episodes == N
    compacted = _db(data).stat().st_size
    assert compacted < grown / 2, (grown, compacted)
    assert await _answers(eng) == before
    assert (await eng.ingest(BANK, [Turn(id="later", user="My dentist is Dr Quillon.")])).stored == ["later"]
    assert any("later" in r.sources for r in await eng.search(BANK, "Who is my dentist?"))
    await eng.close()
    bank_dir = _db(data).parent
    assert not (bank_dir / REBUILD_DIR).exists()
    assert float((bank_dir / COMPACTED_MARKER).read_text()) == pytest.approx(compacted / 1048576, abs=0.1)
    # compacted once: not again until it has grown to twice that
    assert not kuzu_repair.compact_if_grown(bank_dir, BANK, 128)


@pytest.mark.option("bank_idle_close_s")
async def test_an_idle_bank_is_compacted_by_maintenance_and_reopens_with_its_turn_index(
        make_engine, tmp_path, small_banks_compact):
    """The worker compacts while idle, so that the next chat turn does not wait for it."""
    data = tmp_path / "data"
    eng, before = await _grown_bank(make_engine, data, bank_idle_close_s=1)
    grown = _db(data).stat().st_size
    index = eng.banks[BANK].turns
    await asyncio.sleep(1.2)
    assert await eng.maintain() and BANK not in eng.banks
    assert _db(data).stat().st_size < grown / 2
    assert await _answers(eng) == before
    assert eng.banks[BANK].turns is index       # the rows are the same: the index is kept


async def test_a_compacted_copy_that_lost_rows_is_not_swapped_in(
        make_engine, tmp_path, small_banks_compact, monkeypatch, caplog):
    data = tmp_path / "data"
    eng, before = await _grown_bank(make_engine, data)
    await eng.close()
    digest = hashlib.sha256(_db(data).read_bytes()).hexdigest()
    run = kuzu_repair._in_child
    calls = []

    def the_copy_lost_a_turn(function, *args):
        before, after = run(function, *args)
        calls.append(function)
        after["Episodic"] -= 1
        return before, after
    monkeypatch.setattr(kuzu_repair, "_in_child", the_copy_lost_a_turn)

    bank_dir = _db(data).parent
    assert not kuzu_repair.compact_if_grown(bank_dir, BANK, 128)
    assert len(calls) == 1 and "did not hold the same rows" in caplog.text
    assert hashlib.sha256(_db(data).read_bytes()).hexdigest() == digest
    assert not (bank_dir / REBUILD_DIR).exists()
    eng = make_engine(directory=data)       # not tried again until the file has grown as much
    assert (await eng.stats(BANK)).episodes == N
    assert len(calls) == 1
    assert await _answers(eng) == before


async def test_the_export_and_import_run_in_a_child_process(make_engine, tmp_path, small_banks_compact,
                                                            monkeypatch):
    """Kuzu's import takes ~230 MB in the process that runs it, and a worker's heap keeps part
    of it for good: the worker only waits for the child."""
    data = tmp_path / "data"
    eng, before = await _grown_bank(make_engine, data)
    await eng.close()
    grown = _db(data).stat().st_size

    def not_here(*args):
        raise AssertionError("the export ran in the worker's own process")
    monkeypatch.setattr(kuzu_repair, "_export_import_here", not_here)
    assert kuzu_repair.compact_if_grown(_db(data).parent, BANK, 128)
    assert _db(data).stat().st_size < grown / 2
    eng = make_engine(directory=data)
    assert await _answers(eng) == before
    await eng.close()


def _children_left() -> list:
    return [p for p in psutil.process_iter(["cmdline"])
            if any("kuzu_repair._child_main" in part for part in p.info["cmdline"] or [])]


CHILD = r'''
import os, sys
from pathlib import Path
from memoryplus.engine import kuzu_repair
kuzu_repair.COMPACT_MIN_MB = 0
kuzu_repair.compact_if_grown(Path(sys.argv[1]), "compact", 128)
os._exit(5)             # the kill never came
'''


@pytest.mark.parametrize("kill_at", ["compacting:0.05", "compacting:0.2", "rebuild_ready"])
async def test_a_bank_killed_while_it_is_compacted_opens_whole(make_engine, tmp_path, kill_at):
    data = tmp_path / "data"
    eng, before = await _grown_bank(make_engine, data)
    await eng.close()
    bank_dir = _db(data).parent
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false", "MEMORYPLUS_TEST_HOOKS": "1",
           TEST_KILL_IN_REPAIR_ENV: kill_at}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(bank_dir)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (-9, 5), proc.stderr
    # the child that compacted for it died with it (left alone, it would run on for seconds,
    # holding the bank's file)
    deadline = time.monotonic() + 0.5
    while _children_left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _children_left()
    if kill_at == "rebuild_ready":
        assert proc.returncode == -9 and (bank_dir / REBUILD_DIR).exists()

    eng = make_engine(directory=data)           # COMPACT_MIN_MB as shipped: no compaction now
    assert (await eng.stats(BANK)).episodes == N
    assert await _answers(eng) == before
    assert (await eng.ingest(BANK, [Turn(id="later", user="My dentist is Dr Quillon.")])).stored == ["later"]
    await eng.close()
    assert not (bank_dir / REBUILD_DIR).exists()
