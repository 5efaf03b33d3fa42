"""The timeline op on a real Kuzu bank: one entity's facts in the order they held, replaced
facts with their end, the user's own names read as the user, `as_of` and `limit`."""
from __future__ import annotations

from datetime import datetime

import pytest

from memoryplus.config.schema import Settings
from memoryplus.wire import protocol as P
from memoryplus.wire.records import Turn


def _turn(i: str, user: str, when: str) -> Turn:
    return Turn(id=i, user=user, assistant="OK.", time=datetime.fromisoformat(when))


TURNS = [_turn("t1", "Hi, I'm Mira Novak. I live in Lisbon.", "2024-01-05T10:00:00+00:00"),
         _turn("t2", "My sister Anna works at Siemens.", "2024-02-05T10:00:00+00:00"),
         _turn("t3", "I moved to Berlin last week.", "2024-06-05T10:00:00+00:00")]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    from memoryplus.service import LocalMemoryService
    s = LocalMemoryService.open(Settings(extraction_engine="local", embedding_provider="local"),
                                tmp_path_factory.mktemp("timeline"))
    for t in TURNS:                 # one by one: each later turn replaces what it contradicts
        s.ingest(P.IngestParams(bank="b", turns=[t])).result(120)
    yield s
    s.close()


def _timeline(service, entity, **kw):
    return service.timeline(P.TimelineParams(bank="b", entity=entity, **kw)).result(60)


def test_the_users_timeline_in_order_with_the_replaced_fact_and_its_end(service):
    for asked in ("Mira", "mira novak", "me"):      # the user's own names are the user
        tl = _timeline(service, asked)
        assert "User" in tl.matched, asked
        facts = [f.fact for f in tl.facts]
        assert facts.index("User lives in Lisbon") < facts.index("User lives in Berlin"), facts
    lisbon = next(f for f in tl.facts if f.fact == "User lives in Lisbon")
    berlin = next(f for f in tl.facts if f.fact == "User lives in Berlin")
    assert lisbon.invalid_at == berlin.valid_at == TURNS[2].time   # replaced when the move was told
    assert berlin.invalid_at is None and lisbon.said_at == TURNS[0].time


def test_another_entity_and_as_of_and_limit(service):
    anna = _timeline(service, "  ANNA ")
    assert anna.matched == ["Anna"] and {f.fact for f in anna.facts} >= {"Anna works at Siemens"}
    before = _timeline(service, "me", as_of=datetime.fromisoformat("2024-03-01T00:00:00+00:00"))
    assert "User lives in Lisbon" in [f.fact for f in before.facts]
    assert "User lives in Berlin" not in [f.fact for f in before.facts]
    last = _timeline(service, "me", limit=1)
    assert [f.fact for f in last.facts] == ["User lives in Berlin"]     # the most recent


def test_an_unknown_entity_or_bank(service):
    from memoryplus.wire import errors
    assert _timeline(service, "Nobody Known").matched == []
    with pytest.raises(errors.UnknownBank):
        service.timeline(P.TimelineParams(bank="never", entity="Anna")).result(60)
