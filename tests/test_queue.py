"""The ingestion queue, with real threads and real spool files. The sink stands for the worker
(a fake we control); the queue's integration with the real worker is tested elsewhere."""
from __future__ import annotations

import json
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from memoryplus.config.schema import Settings
from memoryplus.plugin import spool as spool_mod
from memoryplus.plugin.queue import (GUI_BLOCK_BUDGET_S, SPOOL_WINDOW_S, IngestError, IngestQueue)
from memoryplus.wire.records import IngestReport, Turn


class Sink:
    """Records every call; `behave(bank, turns)` may raise; `gate` blocks calls until set."""

    def __init__(self, behave=None, gate: threading.Event | None = None):
        self.calls: list[tuple[str, list[str]]] = []
        self.texts: dict[tuple[str, str], str] = {}
        self.behave = behave
        self.gate = gate
        self.entered = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, bank, turns):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        with self.lock:
            self.calls.append((bank, [t.id for t in turns]))
        if self.behave is not None:
            self.behave(bank, turns)
        with self.lock:
            for t in turns:
                self.texts[(bank, t.id)] = t.user
        return IngestReport(stored=[t.id for t in turns])

    def ids(self, bank=None):
        with self.lock:
            return [i for b, ids in self.calls for i in ids if bank is None or b == bank]


def turn(i, text=None):
    return Turn(id=str(i), user=text or f"user message {i}", assistant=f"answer {i}")


def settings(**kw):
    kw.setdefault("batch_delay_ms", 0)
    return Settings(**kw)


@pytest.fixture
def queues():
    made = []

    def make(spool, sink, **kw):
        s = kw.pop("settings", None) or settings(**{k: kw.pop(k) for k in list(kw)
                                                     if k in Settings.model_fields})
        q = IngestQueue(spool, s, sink, **kw)
        made.append(q)
        return q

    yield make
    for q in made:
        q.stop(2)


def spool_text(spool: Path) -> str:
    return "".join(p.read_text() for p in sorted(spool.glob("ingest-*.jsonl"))
                   if ".corrupt" not in p.name)


# ── spooling and replay ───────────────────────────────────────────────────────────────

def test_put_is_spooled_within_the_window_with_private_permissions(tmp_path, queues):
    spool = tmp_path / "spool"
    gate = threading.Event()
    q = queues(spool, Sink(gate=gate))
    q.start()
    assert q.wait_spooled(2)                    # the slot is open and replayed
    t0 = time.monotonic()
    assert q.put("alice", turn(1, "I adopted a cat named Miso")) == "queued"
    assert q.wait_spooled(SPOOL_WINDOW_S)
    assert time.monotonic() - t0 < SPOOL_WINDOW_S
    assert "Miso" in spool_text(spool)
    files = list(spool.glob("ingest-*.jsonl"))
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700
    gate.set()
    assert q.flush(5)
    assert spool_text(spool) == ""              # completed turns leave the spool


CRASH_SCRIPT = textwrap.dedent("""
    import os, sys, threading
    from pathlib import Path
    from memoryplus.config.schema import Settings
    from memoryplus.plugin.queue import IngestQueue
    from memoryplus.wire.records import Turn
    block = threading.Event()
    def sink(bank, turns):
        block.wait()          # the worker never answers: turns stay in flight
    q = IngestQueue(Path(sys.argv[1]), Settings(batch_delay_ms=0, batch_size=2), sink)
    q.start()
    for i in range(7):
        q.put("bank-%d" % (i % 2), Turn(id=str(i), user="crash turn %d" % i))
    q.put("bank-0", Turn(id="0", user="crash turn 0 regenerated"))
    ok = q.wait_spooled(5)
    print("spooled" if ok else "late", flush=True)
    os._exit(9)               # a crash: no stop, no flush, no clean-up
""")


def test_nothing_spooled_is_lost_across_a_crash(tmp_path, queues):
    spool = tmp_path / "spool"
    proc = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(spool)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 9 and "spooled" in proc.stdout, proc.stderr
    sink = Sink()
    q = queues(spool, sink, batch_size=10)
    q.start()
    assert q.flush(10)
    assert sorted(sink.ids(), key=int) == [str(i) for i in range(7)]
    assert sink.texts[("bank-0", "0")] == "crash turn 0 regenerated"
    assert q.counts()["replayed"] == 7
    assert spool_text(spool) == ""


def test_stop_without_flush_leaves_the_rest_spooled_and_a_new_queue_replays_it(tmp_path, queues):
    spool = tmp_path / "spool"
    gate = threading.Event()
    sink1 = Sink(gate=gate)
    q1 = queues(spool, sink1, batch_size=2)
    q1.start()
    for i in range(6):
        q1.put("b", turn(i))
    assert sink1.entered.wait(5)                # a batch is in flight and stuck
    t0 = time.monotonic()
    assert q1.stop(0.3) is False                # it could not finish in time
    assert time.monotonic() - t0 < 2
    assert q1.put("b", turn(99)) == "dropped"   # a stopped queue says so, and lists it
    sink2 = Sink()
    q2 = queues(spool, sink2, batch_size=10)
    q2.start()
    assert q2.flush(10)
    assert sorted(sink2.ids(), key=int) == [str(i) for i in range(6)]
    gate.set()                                   # the stale in-flight call ends harmlessly


def test_corrupt_spool_lines_are_skipped_reported_and_the_rest_kept(tmp_path, queues):
    spool = tmp_path / "spool"
    spool.mkdir()
    good = [json.dumps({"v": 1, "op": "add", "uid": f"old-{i}", "bank": "b",
                        "turn": turn(i).model_dump(mode="json")}) for i in range(4)]
    lines = [good[0], "{not json", good[1], json.dumps({"op": "add", "uid": "x", "bank": "b",
                                                        "turn": {"id": ""}}),
             good[2], json.dumps({"v": 1, "op": "del", "uid": "old-2"}), "\xff\xfe garbage",
             good[3][:40]]                        # a line cut short by a crash
    (spool / "ingest-0.jsonl").write_text("\n".join(lines))
    sink = Sink()
    q = queues(spool, sink, batch_size=10)
    q.start()
    assert q.flush(10)
    assert sorted(sink.ids()) == ["0", "1"]      # 2 was completed; 3 was cut short
    assert q.counts()["corrupt_lines"] == 4
    problems = q.problems
    assert len(problems) == 4 and all("ingest-0.jsonl line" in p for p in problems)
    assert {int(p.split("line ")[1].split()[0]) for p in problems} == {2, 4, 7, 8}
    quarantine = spool / "ingest-0.corrupt.jsonl"
    assert quarantine.exists() and "{not json" in quarantine.read_text()


def test_put_never_touches_the_disk(tmp_path, queues, monkeypatch):
    real_append = spool_mod._SpoolFile.append

    def slow_append(self, lines):          # a stalled disk
        time.sleep(0.3)
        real_append(self, lines)

    monkeypatch.setattr(spool_mod._SpoolFile, "append", slow_append)
    q = queues(tmp_path / "spool", Sink(), queue_size=0)
    q.start()
    worst = total = 0.0
    turns = [turn(i) for i in range(300)]
    for i, t in enumerate(turns):
        t0 = time.perf_counter()
        result = q.put(f"bank{i % 3}", t)
        took = time.perf_counter() - t0
        assert result == "queued"
        worst, total = max(worst, took), total + took
    # a put waits for no disk (each write stalls 300 ms here); the bound leaves room for the
    # interpreter's 5 ms thread switch interval on a loaded machine
    assert worst < 0.02, f"put() took {worst * 1000:.1f} ms"
    assert total / 300 < 0.0005, f"put() took {total / 300 * 1e6:.0f} µs on average"
    assert q.flush(20)
    assert q.counts()["done"] == 300


def test_unwritable_spool_is_reported_and_ingestion_goes_on(tmp_path, queues, monkeypatch):
    def refuse(self):
        raise PermissionError(13, "Permission denied", str(self.path))

    monkeypatch.setattr(spool_mod._SpoolFile, "open", refuse)
    sink = Sink()
    q = queues(tmp_path / "spool", sink)
    q.start()
    t0 = time.perf_counter()
    assert q.put("b", turn(1)) == "queued"
    assert time.perf_counter() - t0 < 0.02
    deadline = time.monotonic() + 5
    while not sink.ids() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sink.ids() == ["1"]
    c = q.counts()
    assert "Permission denied" in (c["spool_error"] or "")
    assert any("spool" in p for p in q.problems)
    # the disk comes back: what waits is spooled then
    q.pause("testing")
    q.put("b", turn(2, "written once the disk works"))
    monkeypatch.undo()
    assert q.wait_spooled(5)
    assert "written once the disk works" in spool_text(tmp_path / "spool")
    assert q.counts()["spool_error"] is None


def test_turns_the_disk_refused_are_saved_when_it_recovers_during_stop(tmp_path, queues, monkeypatch):
    """PyGPT quits while the disk fails for a moment (EIO): stop() keeps trying to spool the
    turns until its timeout instead of once, so the next start still has them."""
    import errno
    spool = tmp_path / "spool"
    q = queues(spool, Sink())
    q.start()
    assert q.wait_spooled(5)
    q.pause("PyGPT about to quit")
    original, until = spool_mod._write_all, time.monotonic() + 1.0

    def failing(fd, data):
        if time.monotonic() < until:
            raise OSError(errno.EIO, "injected I/O error")
        original(fd, data)
    monkeypatch.setattr(spool_mod, "_write_all", failing)
    for i in range(4):
        q.put("b", turn(i, f"said just before quitting {i}"))
    time.sleep(0.2)
    assert q.counts()["unspooled"] == 4 and "I/O error" in (q.counts()["spool_error"] or "")
    assert q.stop(5)                                   # the disk works again after ~1 s
    monkeypatch.undo()
    sink2 = Sink()
    q2 = queues(spool, sink2)
    q2.start()
    assert q2.flush(10)
    assert sorted(sink2.ids()) == ["0", "1", "2", "3"], "every turn replayed on the next start"


# ── overflow ──────────────────────────────────────────────────────────────────────────

@pytest.mark.option("queue_size")
@pytest.mark.option("overflow_policy")
def test_drop_new_counts_and_lists(tmp_path, queues):
    sink = Sink()
    q = queues(tmp_path / "s", sink, queue_size=3, overflow_policy="drop_new")
    q.start()
    q.pause("testing")
    results = [q.put("b", turn(i)) for i in range(5)]
    assert results == ["queued"] * 3 + ["dropped"] * 2
    assert q.put("b", turn(1, "regenerated")) == "replaced"   # a replacement is not an overflow
    c = q.counts()
    assert c["pending"] == 3 and c["dropped"] == 2
    assert [(d.bank, d.turn_id) for d in q.dropped()] == [("b", "3"), ("b", "4")]
    q.resume()
    assert q.flush(5)
    assert sorted(sink.ids()) == ["0", "1", "2"]


@pytest.mark.option("overflow_policy")
def test_drop_oldest_across_banks(tmp_path, queues):
    sink = Sink()
    q = queues(tmp_path / "s", sink, queue_size=3, overflow_policy="drop_oldest")
    q.start()
    q.pause("testing")
    for i, bank in enumerate(["a", "b", "a", "b", "b"]):
        assert q.put(bank, turn(i)) == "queued"
    assert q.counts()["dropped"] == 2
    assert [(d.bank, d.turn_id) for d in q.dropped()] == [("a", "0"), ("b", "1")]
    q.resume()
    assert q.flush(5)
    assert sorted(sink.ids()) == ["2", "3", "4"]
    assert "user message 0" not in spool_text(tmp_path / "s")


@pytest.mark.option("overflow_policy")
def test_block_waits_at_most_the_budget_then_drops(tmp_path, queues):
    q = queues(tmp_path / "s", Sink(), queue_size=2, overflow_policy="block")
    q.start()
    q.pause("testing")
    q.put("b", turn(1))
    q.put("b", turn(2))
    t0 = time.monotonic()
    assert q.put("b", turn(3)) == "dropped"
    waited = time.monotonic() - t0
    assert GUI_BLOCK_BUDGET_S * 0.9 <= waited < GUI_BLOCK_BUDGET_S + 0.08
    c = q.counts()
    assert c["dropped"] == 1 and c["block_timeouts"] == 1
    assert "waited 20 ms" in q.dropped()[0].reason
    # room made within the budget: the put goes through
    threading.Timer(0.005, lambda: q.remove("b", "1")).start()
    assert q.put("b", turn(4)) == "queued"
    assert q.counts()["dropped"] == 1


@pytest.mark.option("queue_size")
def test_configure_applies_live(tmp_path, queues):
    q = queues(tmp_path / "s", Sink(), queue_size=1)
    q.start()
    q.pause("testing")
    assert q.put("b", turn(1)) == "queued"
    assert q.put("b", turn(2)) == "dropped"
    q.configure(settings(queue_size=0))
    assert [q.put("b", turn(i)) for i in range(3, 60)] == ["queued"] * 57
    q.resume()
    assert q.flush(5)


# ── retries and failures ──────────────────────────────────────────────────────────────

class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


@pytest.mark.option("retry_backoff_ms")
@pytest.mark.option("retry_attempts")
def test_backoff_doubles_with_jitter_and_honours_retry_after(tmp_path, queues):
    ft = FakeTime()
    failures = [IngestError("429 Too Many Requests", retry_after=3.0),
                RuntimeError("500 from the provider"),
                TimeoutError("timed out"),
                IngestError("429", retry_after=0.1)]

    def behave(bank, turns):
        if failures:
            raise failures.pop(0)

    sink = Sink(behave)
    q = queues(tmp_path / "s", sink, clock=ft.clock, sleep=ft.sleep, rand=lambda: 0.5,
               retry_attempts=5, retry_backoff_ms=250)
    q.start()
    q.put("b", turn(1))
    assert q.flush(10)
    # 250 ms doubling, jitter factor 1 + 0.25 * 0.5; Retry-After wins when longer
    assert ft.sleeps == [3.0, 0.5625, 1.125, 2.25]
    assert len(sink.calls) == 5 and q.counts()["done"] == 1 and q.counts()["failed"] == 0


@pytest.mark.option("retry_attempts")
def test_failed_turns_are_kept_spooled_and_retryable(tmp_path, queues):
    ft = FakeTime()
    broken = threading.Event()
    broken.set()

    def behave(bank, turns):
        if broken.is_set():
            raise ConnectionError("worker down")

    spool = tmp_path / "s"
    sink = Sink(behave)
    q = queues(spool, sink, clock=ft.clock, sleep=ft.sleep, rand=lambda: 0.0,
               retry_attempts=3, retry_backoff_ms=100)
    q.start()
    q.put("b", turn(1, "my passport number is in the drawer"))
    deadline = time.monotonic() + 5
    while q.counts()["failed"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(sink.calls) == 3 and ft.sleeps == [0.1, 0.2]
    [failed] = q.failed()
    assert failed.turn_id == "1" and failed.attempts == 3 and "worker down" in failed.error
    assert q.flush(5)                                 # failed turns do not hold up a flush
    assert "passport" in spool_text(spool)            # ...and are not vanished
    assert q.stop(2)
    # still failed (and visible) after a restart, and retryable
    sink2 = Sink()
    q2 = queues(spool, sink2)
    q2.start()
    assert q2.wait_spooled(2) and q2.flush(2)
    assert q2.counts()["failed"] == 1 and sink2.calls == []
    assert q2.retry_failed() == 1
    assert q2.flush(5)
    assert sink2.ids() == ["1"] and q2.counts()["failed"] == 0
    assert spool_text(spool) == ""


def test_non_retryable_error_fails_only_the_bad_turn(tmp_path, queues):
    def behave(bank, turns):
        if any(t.id == "poison" for t in turns):
            raise IngestError("validation failed", retryable=False)

    sink = Sink(behave)
    q = queues(tmp_path / "s", sink, batch_size=5)
    q.start()
    q.pause("testing")
    for i in ["a", "poison", "c"]:
        q.put("b", turn(i))
    q.resume()
    assert q.flush(5)
    c = q.counts()
    assert c["done"] == 2 and c["failed"] == 1
    assert [f.turn_id for f in q.failed()] == ["poison"]


def test_a_failing_bank_does_not_block_other_banks(tmp_path, queues):
    def behave(bank, turns):
        if bank == "broken":
            raise IngestError("503", retry_after=1.0)

    sink = Sink(behave)
    q = queues(tmp_path / "s", sink, retry_attempts=10, retry_backoff_ms=100)
    q.start()
    q.put("broken", turn("x"))
    assert sink.entered.wait(5)
    time.sleep(0.05)                                  # "broken" is now waiting to retry
    t0 = time.monotonic()
    for i in range(5):
        q.put("fine", turn(i))
    deadline = time.monotonic() + 5
    while len(sink.ids("fine")) < 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(sink.ids("fine")) == 5
    assert time.monotonic() - t0 < 0.6                # did not wait behind the 1 s retry
    assert q.counts()["retrying"] == 1


# ── batching and fairness ─────────────────────────────────────────────────────────────

@pytest.mark.option("batch_size")
@pytest.mark.option("batch_delay_ms")
def test_batches_by_size_and_delay(tmp_path, queues):
    sink = Sink()
    q = queues(tmp_path / "s", sink, batch_size=3, batch_delay_ms=300)
    q.start()
    assert q.wait_spooled(2)
    t0 = time.monotonic()
    for i in range(7):
        q.put("b", turn(i))
    deadline = time.monotonic() + 2
    while len(sink.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.002)
    assert [ids for _, ids in sink.calls] == [["0", "1", "2"], ["3", "4", "5"]]
    assert time.monotonic() - t0 < 0.2                # full batches go at once
    while len(sink.calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.002)
    waited = time.monotonic() - t0
    assert sink.calls[2][1] == ["6"]
    assert 0.28 <= waited < 0.8                        # the last one waited for the delay


def test_banks_are_served_round_robin(tmp_path, queues):
    sink = Sink()
    q = queues(tmp_path / "s", sink, batch_size=2, queue_size=0)
    q.start()
    q.pause("testing")
    for i in range(8):
        q.put("a", turn(f"a{i}"))
    for i in range(6):
        q.put("b", turn(f"b{i}"))
    q.put("c", turn("c0"))
    q.resume()
    assert q.flush(5)
    order = [bank for bank, _ in sink.calls]
    assert order == ["a", "b", "c", "a", "b", "a", "b", "a"]
    assert all(len(ids) <= 2 for _, ids in sink.calls)


# ── replace, remove, pause ────────────────────────────────────────────────────────────

def test_same_id_replaces_the_waiting_turn(tmp_path, queues):
    sink = Sink()
    q = queues(tmp_path / "s", sink, batch_size=10)
    q.start()
    q.pause("testing")
    assert q.put("b", turn(1, "first answer")) == "queued"
    assert q.put("b", turn(2)) == "queued"
    assert q.put("b", turn(1, "regenerated answer")) == "replaced"
    assert q.put("other", turn(1, "same id, other bank")) == "queued"
    assert q.counts()["pending"] == 3
    q.resume()
    assert q.flush(5)
    assert sink.calls[0] == ("b", ["1", "2"])          # kept its place in the line
    assert sink.texts[("b", "1")] == "regenerated answer"
    assert sink.texts[("other", "1")] == "same id, other bank"


def test_remove_before_ingestion_and_while_in_flight(tmp_path, queues):
    gate = threading.Event()
    done = []
    sink = Sink(gate=gate)
    spool = tmp_path / "s"
    q = queues(spool, sink, on_done=done.append, batch_size=1)
    q.start()
    q.pause("testing")
    q.put("b", turn(1, "my secret diary entry"))
    q.put("b", turn(2, "harmless"))
    assert q.wait_spooled(1)
    assert "secret diary" in spool_text(spool)
    assert q.remove("b", "1") == "removed"
    assert q.remove("b", "1") == "absent"
    deadline = time.monotonic() + 2
    while "secret diary" in spool_text(spool) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "secret diary" not in spool_text(spool)     # forgotten text leaves the disk
    q.resume()
    assert sink.entered.wait(5)
    assert q.in_flight_ids() == [("b", "2")]
    assert q.remove("b", "2") == "in_flight"
    gate.set()
    assert q.flush(5)
    assert sink.ids() == ["2"]
    assert done[-1].forget == ["2"]                    # the caller forgets it right after
    assert q.counts()["done"] == 1


def test_pause_and_resume(tmp_path, queues):
    sink = Sink()
    spool = tmp_path / "s"
    q = queues(spool, sink)
    q.start()
    q.pause("LLM call limit reached (100/hour)")
    for i in range(3):
        q.put("b", turn(i))
    assert q.wait_spooled(1)
    time.sleep(0.1)
    c = q.counts()
    assert sink.calls == [] and c["pending"] == 3
    assert c["paused_reason"] == "LLM call limit reached (100/hour)"
    assert q.flush(0.1) is False
    assert spool_text(spool).count('"op":"add"') == 3  # waiting turns stay on disk
    q.resume()
    assert q.flush(5)
    assert q.counts()["paused_reason"] is None and len(sink.ids()) == 3


# ── threads ───────────────────────────────────────────────────────────────────────────

def test_concurrent_producers_lose_nothing(tmp_path, queues):
    calls = iter(range(10**9))

    def behave(bank, turns):
        if next(calls) % 4 == 1:                        # every fourth call fails once
            raise IngestError("flaky", retry_after=0.0)

    sink = Sink(behave)
    q = queues(tmp_path / "s", sink, queue_size=0, batch_size=4, retry_attempts=10,
               retry_backoff_ms=100, rand=lambda: 0.0)
    q.start()
    start = threading.Barrier(6)

    def produce(p):
        start.wait()
        for i in range(100):
            q.put(f"bank{p % 3}", turn(f"{p}-{i}"))
            if i % 10 == 0:
                q.counts()
                time.sleep(0.001)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert q.flush(30)
    c = q.counts()
    assert c["done"] == 600 and c["failed"] == 0 and c["dropped"] == 0
    assert len(set(sink.texts)) == 600
    assert len(sink.calls) > 150                        # batches, and retries among them
    assert spool_text(tmp_path / "s") == ""


def test_two_live_queues_never_share_a_spool_and_orphans_are_adopted(tmp_path, queues):
    spool = tmp_path / "spool"
    gate = threading.Event()
    first = queues(spool, Sink(gate=gate))
    first.start()
    assert first.wait_spooled(2)
    # another process uses the same directory while we run, and crashes
    proc = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(spool)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 9 and "spooled" in proc.stdout, proc.stderr
    assert first.spool_path.name == "ingest-0.jsonl"
    assert (spool / "ingest-1.jsonl").exists()          # it had its own file
    assert first.stop(2)
    sink = Sink()
    second = queues(spool, sink, batch_size=10)
    second.start()
    assert second.flush(10)
    assert sorted(sink.ids(), key=int) == [str(i) for i in range(7)]
    assert not (spool / "ingest-1.jsonl").exists()      # adopted, then removed
    gate.set()


class FlushingLater(Sink):
    """A worker engine `instance` that answers `flushed=False` while `more_waiting(bank)` (it
    flushes with a later batch)."""

    def __init__(self, instance="engine-1"):
        super().__init__()
        self.instance = instance
        self.more_waiting = lambda bank: True

    def __call__(self, bank, turns):
        super().__call__(bank, turns)
        return IngestReport(stored=[t.id for t in turns], flushed=not self.more_waiting(bank),
                            instance=self.instance)


def wait_for_spool(spool: Path, pred, timeout: float = 3.0) -> str:
    deadline = time.monotonic() + timeout
    while not pred(text := spool_text(spool)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return text


def test_turns_answered_unflushed_stay_spooled_until_the_flush(tmp_path, queues):
    spool = tmp_path / "s"
    sink = FlushingLater()
    q = queues(spool, sink, batch_size=2)
    sink.more_waiting = lambda bank: q.waiting(bank) > 0    # as the plugin asks
    q.start()
    q.pause("a backlog")
    for i in range(3):
        q.put("b", turn(i, f"backlog turn {i}"))
    q.put("c", turn(9, "another bank's turn"))
    q.resume()
    assert q.flush(5)
    assert sink.calls[0] == ("b", ["0", "1"])
    c = q.counts()
    assert c["done"] == 4 and c["unflushed"] == 0, c        # the last batch of each bank flushed
    assert wait_for_spool(spool, lambda t: t == "") == ""

    sink.more_waiting = lambda bank: True                        # the worker has not flushed yet
    q.put("b", turn(5, "answered before the flush"))
    assert q.flush(5)
    assert q.counts()["unflushed"] == 1
    assert "answered before the flush" in wait_for_spool(spool, lambda t: False, 0.3)
    sink.more_waiting = lambda bank: False
    q.put("b", turn(6, "flushed with this one"))
    assert q.flush(5)
    assert q.counts()["unflushed"] == 0
    assert wait_for_spool(spool, lambda t: t == "") == "", "the flush lets both go"


def test_turns_held_leave_the_spool_once_an_answer_says_they_were_flushed_before_it(tmp_path, queues):
    """A chat turn answered unflushed (the worker flushes when idle) stays spooled until a
    later answer of the same engine says the bank had nothing unflushed when it began."""
    spool = tmp_path / "s"
    answers = iter([False, False, True])     # flushed_before of each answer: the idle flush came before the third

    def sink(bank, turns):
        return IngestReport(stored=[t.id for t in turns], flushed=False, flushed_before=next(answers),
                            instance="engine-1")
    q = queues(spool, sink, batch_size=1)
    q.start()
    for i, text in enumerate(["first chat turn", "second chat turn", "third chat turn"]):
        q.put("b", turn(i, text))
        assert q.flush(5)
        if i == 1:
            assert q.counts()["unflushed"] == 2
            assert "first chat turn" in wait_for_spool(spool, lambda t: False, 0.3)
    assert q.counts()["unflushed"] == 1, "the first two were flushed before the third"

    def live(text):       # the turns the spool still holds: added and not deleted
        recs = [json.loads(line) for line in text.splitlines() if line.strip()]
        gone = {r["uid"] for r in recs if r["op"] == "del"}
        return [r["turn"]["user"] for r in recs if r["op"] == "add" and r["uid"] not in gone]
    assert live(wait_for_spool(spool, lambda t: len(live(t)) == 1)) == ["third chat turn"]


def test_a_new_worker_engine_stores_the_unflushed_turns_again_newest_version_only(tmp_path, queues):
    spool = tmp_path / "s"
    sink = FlushingLater(instance="engine-1")
    q = queues(spool, sink, batch_size=1)
    q.start()
    q.put("b", turn(1, "first version"))
    q.put("b", turn(2, "kept"))
    q.put("c", turn(3, "other bank"))
    assert q.flush(5)
    q.put("b", turn(1, "second version"))                   # regenerated: a newer version, also held
    assert q.flush(5)
    assert q.counts()["unflushed"] == 4 and q.counts()["done"] == 4
    sink.instance = "engine-2"                              # engine-1 died before its flush
    sink.more_waiting = lambda bank: False
    q.put("c", turn(4, "first answer of the new engine"))
    assert q.flush(5)
    again = sink.calls[5:]
    assert sorted(i for _, ids in again for i in ids) == ["1", "2", "3"], sink.calls
    assert sink.texts[("b", "1")] == "second version"
    c = q.counts()
    assert c["unflushed"] == 0 and c["done"] == 5, c        # each turn counted once
    assert wait_for_spool(spool, lambda t: t == "") == ""


def test_a_forgotten_unflushed_turn_leaves_the_spool_at_once(tmp_path, queues):
    spool = tmp_path / "s"
    sink = FlushingLater()
    q = queues(spool, sink, batch_size=1)
    q.start()
    q.put("b", turn(1, "my secret diary entry"))
    q.put("b", turn(2, "harmless"))
    q.put("x", turn(3, "a cleared bank's turn"))
    assert q.flush(5)
    assert "secret diary" in wait_for_spool(spool, lambda t: "secret diary" in t)
    assert q.remove("b", "1") == "absent"                   # stored: the caller forgets it in the graph
    q.forgotten("x")                                        # the bank was cleared
    text = wait_for_spool(spool, lambda t: "secret diary" not in t and "cleared" not in t)
    assert "secret diary" not in text and "cleared bank" not in text and "harmless" in text
    assert q.counts()["unflushed"] == 1
    sink.instance = "engine-2"
    sink.more_waiting = lambda bank: False
    q.put("b", turn(4, "next"))
    assert q.flush(5)
    assert sorted(i for _, ids in sink.calls[3:] for i in ids) == ["2", "4"], "forgotten turns are not stored again"
