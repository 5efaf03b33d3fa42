"""The search cache: recent search results per bank, LRU with a TTL and careful fuzzy matching.

Thread-safe (one lock; the GUI thread and pool threads call it). Entries are keyed by bank and
by the *normalised* query (NFKC, case-folded, apostrophes dropped inside words, every other
punctuation or symbol a space, whitespace collapsed), so "What's my name?" and "whats my name"
are the same query. `size` bounds the entries of all banks together (least recently used goes
first); an entry older than `ttl_s` is never returned (ttl 0: nothing is ever returned).

Fuzzy matching. A cached result serves a *different* query only when all of these hold — a
false hit injects the wrong memories, a false miss only costs one search, so the rule leans
hard towards missing:

1. both normalised queries have at least `FUZZY_MIN_CHARS` (12) characters and `FUZZY_MIN_WORDS`
   (3) words, and at most `FUZZY_MAX_CHARS` (short queries such as "hi"/"ok" need an exact
   normalised match; very long ones are compared exactly, for speed);
2. their *content words* are the same set. Content words are every word except a small
   closed class that shapes a question without choosing its subject: articles, auxiliary and
   modal verbs, wh-words, politeness fillers, "of"/"about" (`QUERY_FILLER_WORDS` in common/text.py). Negations, pronouns,
   prepositions, quantifiers and every open-class word are content, so "i love cats" /
   "i hate cats", "do i like cats" / "do i not like cats", "flights to paris" / "flights
   from paris" never match. Two content words are the same when equal after a light plural
   stem (cats → cat, sister's → sister), or — spelling variants and typos — when both have
   at least 5 letters, no digits, the same first two letters and a difflib ratio of at least
   `WORD_SIMILARITY` (colour/color, favourite/favorite); negating prefixes (un-, in-, im-,
   dis-, non-) change the first letters, so unhappy/happy and impossible/possible differ;
3. the difflib ratio of the two normalised queries is at least `similarity` (the setting).

`generation(bank)` and `put(..., generation=...)` close the race between a search that started
before its bank was written and an `invalidate(bank)` that landed while it ran: a put carrying
an older generation is ignored (counted as `stale_puts`).

Returned values are the stored objects themselves: treat them as read-only.
"""
from __future__ import annotations

import threading
import time
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Callable, Hashable

from memoryplus.common.text import QUERY_FILLER_WORDS, stem

FUZZY_MIN_CHARS = 12
FUZZY_MIN_WORDS = 3
FUZZY_MAX_CHARS = 512
WORD_SIMILARITY = 0.85
WORD_FUZZY_MIN_LEN = 5


_APOSTROPHES = "'\u2019\u02bc\u2018`\u00b4"


def normalize(query: str) -> str:
    """The cache's view of a query: NFKC, case-folded, punctuation and symbols gone."""
    if not isinstance(query, str):
        query = "" if query is None else str(query)
    query = unicodedata.normalize("NFKC", query).casefold()
    out = []
    for ch in query:
        if ch in _APOSTROPHES:
            continue
        cat = unicodedata.category(ch)
        out.append(ch if cat[0] in "LNM" else " ")
    return " ".join("".join(out).split())


def content_words(normalised: str) -> frozenset[str]:
    return frozenset(stem(w) for w in normalised.split() if w not in QUERY_FILLER_WORDS)


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    if (len(a) < WORD_FUZZY_MIN_LEN or len(b) < WORD_FUZZY_MIN_LEN or a[:2] != b[:2]
            or any(c.isdigit() for c in a) or any(c.isdigit() for c in b)):
        return False
    return SequenceMatcher(None, a, b, autojunk=False).ratio() >= WORD_SIMILARITY


def _same_content(a: frozenset[str], b: frozenset[str]) -> bool:
    if a == b:
        return True
    only_a, only_b = a - b, b - a
    return (all(any(_same_word(x, y) for y in only_b) for x in only_a)
            and all(any(_same_word(y, x) for x in only_a) for y in only_b))


def fuzzy_eligible(normalised: str) -> bool:
    return (FUZZY_MIN_CHARS <= len(normalised) <= FUZZY_MAX_CHARS
            and len(normalised.split()) >= FUZZY_MIN_WORDS)


def similar(q1: str, q2: str, similarity: float) -> bool:
    """Whether two raw queries may share a cached result (the rule of the module docstring)."""
    return _similar(_Key(normalize(q1)), _Key(normalize(q2)), similarity) is not None


class _Key:
    __slots__ = ("norm", "words", "eligible")

    def __init__(self, norm: str):
        self.norm = norm
        self.eligible = fuzzy_eligible(norm)
        self.words = content_words(norm) if self.eligible else frozenset()


def _similar(a: _Key, b: _Key, similarity: float) -> float | None:
    """The ratio when a and b match, else None. Exact normalised matches are 1.0."""
    if a.norm == b.norm:
        return 1.0
    if not (a.eligible and b.eligible) or similarity >= 1.0:
        return None
    if not _same_content(a.words, b.words):
        return None
    sm = SequenceMatcher(None, a.norm, b.norm, autojunk=False)
    if sm.real_quick_ratio() < similarity or sm.quick_ratio() < similarity:
        return None
    ratio = sm.ratio()
    return ratio if ratio >= similarity else None


@dataclass
class _Entry:
    key: _Key
    value: Any
    stored_at: float


class SearchCache:
    """Per-bank LRU + TTL + fuzzy search cache (see the module docstring)."""

    def __init__(self, size: int, ttl_s: float, similarity: float, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic):
        self._lock = threading.Lock()
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._gens: dict[str, int] = {}
        self._epoch = 0
        self._stats = dict(hits=0, fuzzy_hits=0, misses=0, expired=0, evictions=0,
                           invalidations=0, stale_puts=0)
        self.size = 0
        self.ttl_s = 0.0
        self.similarity = 1.0
        self.enabled = False
        self.configure(size, ttl_s, similarity, enabled)

    @classmethod
    def from_settings(cls, settings: Any, clock: Callable[[], float] = time.monotonic) -> "SearchCache":
        return cls(settings.search_cache_size, settings.search_cache_ttl,
                   settings.search_cache_similarity, settings.search_cache, clock=clock)

    def apply_settings(self, settings: Any) -> None:
        self.configure(settings.search_cache_size, settings.search_cache_ttl,
                       settings.search_cache_similarity, settings.search_cache)

    # ── configuration ──────────────────────────────────────────────────────────────────
    def configure(self, size: int, ttl_s: float, similarity: float, enabled: bool = True) -> None:
        with self._lock:
            self.size = max(0, int(size))
            self.ttl_s = max(0.0, float(ttl_s))
            self.similarity = min(1.0, max(0.0, float(similarity)))
            self.enabled = bool(enabled)
            if not self._active():
                self._entries.clear()
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
                self._stats["evictions"] += 1

    def _active(self) -> bool:
        return self.enabled and self.size > 0

    # ── use ────────────────────────────────────────────────────────────────────────────
    def generation(self, bank: str) -> Hashable:
        """A token to pass to put(): a put with a token older than the bank's last write is ignored."""
        with self._lock:
            return (self._epoch, self._gens.get(bank, 0))

    def get(self, bank: str, query: str) -> Any | None:
        """The cached value for this query (or a similar one) in this bank, else None."""
        key = _Key(normalize(query))
        with self._lock:
            if not self._active():
                return None
            now = self._clock()
            exact = self._entries.get((bank, key.norm))
            if exact is not None and not self._fresh(exact, now):
                del self._entries[(bank, key.norm)]
                self._stats["expired"] += 1
                exact = None
            if exact is not None:
                self._entries.move_to_end((bank, key.norm))
                self._stats["hits"] += 1
                return exact.value
            best: tuple[float, tuple[str, str]] | None = None
            if key.eligible and self.similarity < 1.0:
                for k, entry in list(self._entries.items()):
                    if k[0] != bank:
                        continue
                    if not self._fresh(entry, now):
                        del self._entries[k]
                        self._stats["expired"] += 1
                        continue
                    ratio = _similar(key, entry.key, self.similarity)
                    if ratio is not None and (best is None or ratio > best[0]):
                        best = (ratio, k)
            if best is None:
                self._stats["misses"] += 1
                return None
            self._entries.move_to_end(best[1])
            self._stats["hits"] += 1
            self._stats["fuzzy_hits"] += 1
            return self._entries[best[1]].value

    def put(self, bank: str, query: str, value: Any, generation: Hashable | None = None) -> bool:
        """Store a result; False when the cache is off or the generation is stale."""
        key = _Key(normalize(query))
        with self._lock:
            if not self._active() or self.ttl_s <= 0:
                return False
            if generation is not None and generation != (self._epoch, self._gens.get(bank, 0)):
                self._stats["stale_puts"] += 1
                return False
            k = (bank, key.norm)
            self._entries[k] = _Entry(key, value, self._clock())
            self._entries.move_to_end(k)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
                self._stats["evictions"] += 1
            return True

    def invalidate(self, bank: str) -> int:
        """Forget every entry of a bank (call it when that bank is written). Returns how many."""
        with self._lock:
            self._gens[bank] = self._gens.get(bank, 0) + 1
            doomed = [k for k in self._entries if k[0] == bank]
            for k in doomed:
                del self._entries[k]
            self._stats["invalidations"] += 1
            return len(doomed)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._epoch += 1

    def stats(self) -> dict[str, int]:
        with self._lock:
            out = dict(self._stats)
            out["size"] = len(self._entries)
            return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _fresh(self, entry: _Entry, now: float) -> bool:
        return now - entry.stored_at < self.ttl_s


def bank_events_listener(cache: "SearchCache | None", queue_of: Callable[[], Any]) -> Callable[[str, dict], None]:
    """A WorkerClient listener (`client.subscribe(...)`) for the worker's bank events
    (wire/protocol.py), whichever client caused them (the CLI, another window): a changed bank's
    cached searches go at once, not after the TTL; the turns a forget removed leave the queue's
    spool (`IngestQueue.forgotten`), and so do a cleared bank's held copies, so that no replay
    stores them again. `queue_of()` gives the queue, or None while the plugin is starting."""
    from memoryplus.wire import protocol as P

    def on_event(event: str, data: dict) -> None:
        bank = data.get("bank")
        if not isinstance(bank, str) or not bank:
            return
        if cache is not None:
            cache.invalidate(bank)
        queue = queue_of()
        if queue is None:
            return
        if event == P.FORGOTTEN and data.get("caller_ids"):
            queue.forgotten(bank, [str(t) for t in data["caller_ids"]])
        elif event == P.BANK_CHANGED and data.get("cleared"):
            queue.forgotten(bank)
    return on_event
