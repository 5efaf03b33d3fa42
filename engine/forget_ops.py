"""Forgetting: the last turn, results or turns by id, or the memories that strongly match a
text, with the episodes behind them, so that the text is found nowhere in the bank after."""
from __future__ import annotations

from memoryplus.engine.bank_pool import Bank, BankPool
from memoryplus.engine.episodes import EpisodeMeta, ts
from memoryplus.engine.errors import EngineError
from memoryplus.engine.removal import RemovalOps
from memoryplus.common.text import MATCH_STOP_WORDS, WORD
from memoryplus.engine.search_ops import SearchOps
from memoryplus.wire.banks import episode_uuid
from memoryplus.wire.records import ForgetReport, SearchResult


class ForgetOps:
    def __init__(self, pool: BankPool, searcher: SearchOps, removal: RemovalOps):
        self.pool = pool
        self.searcher = searcher
        self.removal = removal

    async def forget(self, bank_name: str, *, last: bool = False, ids: list[str] | None = None,
                     text: str | None = None, confirm: bool = True) -> ForgetReport:
        if sum(bool(x) for x in (last, ids, text)) != 1:
            raise EngineError("forget needs exactly one of: the last turn, ids, or a text")
        bank = await self.pool.existing(bank_name)
        return await self.pool.run(bank, self._forget(bank, last, ids or [], text, confirm))

    async def _forget(self, bank: Bank, last: bool, ids: list[str], text: str | None,
                      confirm: bool) -> ForgetReport:
        report = ForgetReport()
        if text:
            report.matches = await self.strong_matches(bank, text)
            if not confirm:
                report.dry_run = True
                return report
            ids = [m.id for m in report.matches]
        if not confirm:
            episodes, report.forgotten = await self._targets(bank, last, ids)
            rows = await self.pool.episodes(bank, episodes)
            report.sources = [EpisodeMeta.parse(r["name"], u).id for u, r in rows.items()]
            report.matches = [SearchResult(id=u, kind="episode", text=r["content"] or "",
                                           valid_at=ts(r["valid_at"]),
                                           sources=[EpisodeMeta.parse(r["name"], u).id])
                              for u, r in rows.items()]
            report.dry_run = True
            return report
        async with bank.write_lock:
            episodes, report.forgotten = await self._targets(bank, last, ids)
            if episodes:
                rows = await self.pool.episodes(bank, episodes)
                report.sources = [EpisodeMeta.parse(r["name"], u).id for u, r in rows.items()]
                report.episodes_removed = await self.removal.remove_episodes(bank, list(rows))
                await self.pool.checkpoint(bank)
        return report

    async def _targets(self, bank: Bank, last: bool, ids: list[str]) -> tuple[list[str], list[str]]:
        """The episodes a forget removes, and the ids it found (in the caller's order)."""
        if last:
            rows = await self.pool.query(bank, "episodes_page", gid=bank.slug, skip=0, limit=1)
            episodes = [r["uuid"] for r in rows]
            return episodes, episodes
        episodes, resolved = await self._episodes_behind(bank, ids)
        return episodes, [i for i in ids if i in resolved]

    async def _episodes_behind(self, bank: Bank, ids: list[str]) -> tuple[list[str], set[str]]:
        """The episodes behind result ids (episode, fact or entity ids) or turn ids (a turn's
        caller id), and which of the ids exist."""
        ids = list(dict.fromkeys(ids))
        episodes = list((await self.pool.episodes(bank, ids)).keys())
        resolved = set(episodes)
        by_turn = {episode_uuid(bank.slug, i): i for i in ids if i not in resolved}
        for uuid_ in (await self.pool.episodes(bank, list(by_turn))).keys():
            episodes.append(uuid_)
            resolved.add(by_turn[uuid_])
        for r in await self.pool.query(bank, "facts_by_uuid", uuids=ids):
            episodes.extend(r["episodes"] or [])
            resolved.add(r["uuid"])
        for r in await self.pool.query(bank, "episode_uuids_mentioning", uuids=ids):
            episodes.append(r["episode"])
            resolved.add(r["entity"])
        return list(dict.fromkeys(episodes)), resolved

    async def strong_matches(self, bank: Bank | str, text: str) -> list[SearchResult]:
        """Memories that match a text strongly: most of its words are in them. A weak, vague
        match is never offered for forgetting."""
        if isinstance(bank, str):
            bank = await self.pool.bank(bank, create=False)
        words = {w.lower() for w in WORD.findall(text) if len(w) > 2} - MATCH_STOP_WORDS
        if not words:
            return []
        results = await self.searcher.ranked(bank, text, 50, None, whole=True)
        strong = []
        for r in results:
            # An entity matches by its name, not its summary: a hub such as "User" sums up
            # everything, and forgetting it would take every turn with it.
            have = {w.lower() for w in WORD.findall(r.name if r.kind == "entity" else r.text)}
            if len(words & have) / len(words) >= 0.75:
                strong.append(r)
        return strong
