"""The typed MemoryService: the engine in process and the same engine behind a real worker give
the same records, and the same error classes (their codes cross the wire)."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from memoryplus.config.schema import Settings
from memoryplus.wire import errors
from memoryplus.wire import protocol as P
from memoryplus.wire.records import (
    BankInfo, BankStats, EntityRow, EpisodeRow, ExportedBank, FactRow, ForgetReport, Health, ImportReport,
    IngestReport, SearchResult, Timeline, Turn,
)

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = Settings(extraction_engine="local", embedding_provider="local")
TURNS = [Turn(id="t1", user="My sister Anna lives in Munich and works at Siemens.", assistant="Nice."),
         Turn(id="t2", user="I moved to Hamburg last month.", assistant="Exciting!")]


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """The same operations on two data directories: one in process, one through a worker."""
    from memoryplus.client.worker_client import WorkerClient
    from memoryplus.service import LocalMemoryService, RemoteMemoryService
    local = LocalMemoryService.open(SETTINGS, tmp_path_factory.mktemp("local"))
    remote = RemoteMemoryService(WorkerClient(SETTINGS, tmp_path_factory.mktemp("remote"), mode="persistent",
                                              app="test").start())
    deadline = time.monotonic() + 60
    while remote.status()["state"] != "ready" and time.monotonic() < deadline:
        time.sleep(0.05)
    yield {"local": local, "remote": remote}
    local.close()
    remote.close()


@pytest.mark.parametrize("where", ["local", "remote"])
def test_every_operation_answers_with_records(services, where):
    s = services[where]
    rep = s.ingest(P.IngestParams(bank="b", turns=TURNS), timeout=120).result(120)
    assert isinstance(rep, IngestReport) and sorted(rep.stored) == ["t1", "t2"]
    found = s.search(P.SearchParams(bank="b", query="Where does Anna live?"), timeout=60).result(60)
    assert found and all(isinstance(r, SearchResult) for r in found)
    assert any("Munich" in r.text for r in found)
    timeline = s.timeline(P.TimelineParams(bank="b", entity="anna"), timeout=60).result(60)
    assert isinstance(timeline, Timeline) and timeline.matched == ["Anna"]
    assert any("Munich" in f.fact and f.said_at for f in timeline.facts)
    episodes = s.browse(P.BrowseParams(bank="b", what="episodes"), timeout=60).result(60)
    assert {type(r) for r in episodes} == {EpisodeRow} and {r.source for r in episodes} == {"t1", "t2"}
    facts = s.browse(P.BrowseParams(bank="b", what="facts"), timeout=60).result(60)
    assert facts and {type(r) for r in facts} == {FactRow}
    entities = s.browse(P.BrowseParams(bank="b", what="entities"), timeout=60).result(60)
    assert entities and {type(r) for r in entities} == {EntityRow}
    assert any(r.relations for r in entities), "entities carry the facts that touch them"
    stats = s.stats(P.BankParams(bank="b"), timeout=60).result(60)
    assert isinstance(stats, BankStats) and stats.episodes == 2
    assert [b for b in s.banks(timeout=60).result(60)] == [BankInfo(name="b", episodes=2, entities=stats.entities,
                                                                    facts=stats.facts)]
    export = s.export(P.BankParams(bank="b"), timeout=60).result(60)
    assert isinstance(export[0], ExportedBank) and {r.type for r in export} >= {"bank", "episode", "entity", "fact"}
    imported = s.import_records(P.ImportParams(bank="copy", records=[r.model_dump(mode="json") for r in export]),
                                timeout=120).result(120)
    assert isinstance(imported, ImportReport) and imported.episodes == 2 and not imported.problems
    health = s.health(timeout=60).result(60)
    assert isinstance(health, Health) and health.ok and "b" in health.banks_open
    embedder = s.embedder_status(timeout=60).result(60)
    assert embedder.banks["b"].id == stats.embedder
    rating = s.rate(P.RateParams(bank="b", id=facts[0].id, value=1), timeout=60).result(60)
    assert rating == 1
    forgot = s.forget(P.ForgetParams(bank="b", ids=["t2"]), timeout=60).result(60)
    assert isinstance(forgot, ForgetReport) and forgot.sources == ["t2"]


@pytest.mark.parametrize("where", ["local", "remote"])
def test_errors_are_the_same_classes_in_process_and_through_a_worker(services, where):
    s = services[where]
    with pytest.raises(errors.UnknownBank) as err:
        s.stats(P.BankParams(bank="never-stored"), timeout=60).result(60)
    assert err.value.code == "unknown_bank" and err.value.origin == "UnknownBankError"
    assert "unknown bank" in str(err.value)


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_timeline_of_a_hostile_bank_or_no_entity_is_refused_clearly(services, where):
    s = services[where]
    for bad in ({"bank": "b", "entity": "   "}, {"bank": "b", "entity": "x" * 201},
                {"bank": "a\x00b", "entity": "Anna"}):
        with pytest.raises(Exception) as err:    # the params model refuses it before any call
            s.timeline(P.TimelineParams(**bad), timeout=60).result(60)
        assert "entity" in str(err.value) or "NUL" in str(err.value)


def test_the_worker_answers_an_error_with_its_code(services):
    """On the wire: the code beside the class name (what the client acts on is the code)."""
    from memoryplus.client.worker_client import WorkerError
    client = services["remote"].client
    with pytest.raises(WorkerError) as err:
        client.call("stats", {"bank": "never-stored"}, timeout=60)
    assert err.value.type == "UnknownBankError" and err.value.code == "unknown_bank"
    assert isinstance(errors.from_code(err.value.code, str(err.value)), errors.UnknownBank)
    with pytest.raises(errors.BadParams):     # no query: the request's own fault, never sent
        services["remote"].search(P.SearchParams.model_construct(bank="b"), timeout=60).result(60)


def test_a_closed_client_is_a_typed_error(tmp_path):
    from memoryplus.client.worker_client import WorkerClient
    from memoryplus.service import RemoteMemoryService
    service = RemoteMemoryService(WorkerClient(SETTINGS, tmp_path, mode="persistent", app="test"))
    service.close()
    with pytest.raises(errors.WorkerUnavailable):
        service.banks(timeout=5).result(10)


def test_only_the_remote_service_sends_operations_by_name():
    """The plugin, the UI and the CLI call MemoryService: no `submit("op", {...})` or
    `call("op", ...)` of a worker client is left in them."""
    by_name = re.compile(r"\.(submit|call)\(\s*[\"']")
    offenders = [f"{p.relative_to(ROOT)}:{i}" for folder in ("plugin", "ui", "cli")
                 for p in sorted((ROOT / folder).glob("*.py"))
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if by_name.search(line)]
    assert not offenders, offenders
