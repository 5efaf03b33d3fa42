"""A timeline: what a bank knows about one person, place or thing, fact by fact, each with the
time it held (valid_at to invalid_at) and the time it was said, replaced facts included."""
from __future__ import annotations

import re
from datetime import datetime, timezone

from memoryplus.engine import extract as local_extract
from memoryplus.engine.bank_pool import Bank, BankPool
from memoryplus.engine.episodes import COMPLETE, EpisodeMeta, ts
from memoryplus.wire.records import Timeline, TimelineFact, as_utc

MAX_MATCHED = 5             # a vague name ("Anna" among many Annas) resolves to a few, not all
# what the user calls themselves in a question (their facts say "User")
_SELF = frozenset({"i", "me", "myself", "my", "user", "the user", "you", "yourself"})
_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


class TimelineOps:
    def __init__(self, pool: BankPool):
        self.pool = pool

    async def timeline(self, bank_name: str, entity: str, limit: int = 50,
                       as_of: datetime | None = None) -> Timeline:
        bank = await self.pool.existing(bank_name)
        async with self.pool.reading(bank):
            return await self.pool.run(bank, self._timeline(bank, entity, limit, as_of))

    async def _timeline(self, bank: Bank, entity: str, limit: int, as_of: datetime | None) -> Timeline:
        matched = await self.resolve(bank, entity)
        out = Timeline(entity=entity, matched=[name for _, name in matched])
        if not matched:
            return out
        rows = await self.pool.query(bank, "facts_touching", uuids=[u for u, _ in matched])
        rows = list({r["uuid"]: r for r in rows}.values())
        episodes = await self.pool.episodes(bank, [u for r in rows for u in r["episodes"] or []])
        t = as_utc(as_of) if as_of is not None else None
        facts: list[TimelineFact] = []
        for r in rows:
            told = [ts(episodes[u]["valid_at"]) for u in r["episodes"] or [] if u in episodes
                    and EpisodeMeta.parse(episodes[u]["name"], u).state == COMPLETE]
            if r["episodes"] and not told:
                continue                # its turn is still being written (or was forgotten)
            said = min((d for d in told if d is not None), default=None) or ts(r["created_at"])
            fact = TimelineFact(id=r["uuid"], fact=r["fact"] or "", valid_at=ts(r["valid_at"]),
                                invalid_at=ts(r["invalid_at"]), said_at=said)
            if t is not None and ((fact.valid_at or said or _EPOCH) > t):
                continue                # had not begun (or not been said) by then
            facts.append(fact)
        facts.sort(key=lambda f: (f.valid_at or f.said_at or _EPOCH, f.said_at or _EPOCH, f.id))
        out.facts = facts[-limit:]      # the most recent ones, oldest first
        return out

    async def resolve(self, bank: Bank, entity: str) -> list[tuple[str, str]]:
        """The bank's entities a name stands for, as (uuid, name): the user for "me" or for one
        of the user's own names (as a search reads them), else the entity of that name, else
        those whose name holds it as whole words ("Anna" for "Anna Weber")."""
        index = await self.pool.entity_index(bank)
        key = " ".join(entity.lower().split())
        found: dict[str, str] = {}
        user = index.get("user")
        if user is not None:
            names = [r["target_name"] for r in await self.pool.query(
                bank, "current_facts_named", source=user[0], relations=["IS_CALLED"])]
            read = local_extract.as_the_user(entity, names)
            if key in _SELF or (read is not None and read[0].strip() in ("I", "my")):
                found[user[0]] = user[1]
        if key in index:
            found.setdefault(*index[key])
        if not found:
            phrase = re.compile(rf"(?<!\w){re.escape(key)}(?!\w)")
            for name, (uuid, shown) in sorted(index.items()):
                if phrase.search(name) and len(found) < MAX_MATCHED:
                    found[uuid] = shown
        return list(found.items())
