"""BM25 over a bank's facts (or entities) in memory, scored as Kuzu's full-text index does.

graphiti's fulltext searches of a Kuzu bank are answered here; the bank has no Kuzu
full-text index. graphiti's own are Kuzu 0.11.3's `QUERY_FTS_INDEX` on
`RelatesToNode_.edge_name_and_fact` and `Entity.node_name_and_summary`: 7 and 3 ms of
Kuzu's time a search at 20,000 turns, growing with the bank, wrong once a query word is
held by 1,000 rows or more (Kuzu's dense scan skips live documents stored after deleted
ones, and graphiti's saves delete and re-add a row's document: 47% of the facts the dense
bench questions reach were never scored; see docs/PERFORMANCE.md), and 33 MB of every open
bank's memory with their stop-word table. Here every row is scored, by Kuzu's rules:

- a document is a row's two texts (`name` and `fact`, or `name` and `summary`), each on its
  own: every run of digits and ASCII punctuation becomes a space (Kuzu's default ignore
  pattern), lower-cased (Python's `lower`, Kuzu's on all but 44 rare code points), split on
  spaces, Kuzu's own stop words dropped (engine/stopwords.py), each word
  stemmed by Kuzu's own `stem(word, 'english')` (asked in batches, remembered); its length
  is its number of terms;
- a query is normalised the same way (`*` and `?` too: no wildcards), its stop words kept,
  each distinct stem counted once;
- score = Σ log10((N − df + 0.5) / (df + 0.5) + 1) · tf (k + 1) / (tf + k (1 − b + b · len / avglen)),
  k 1.2, b 0.75, N and avglen over every row of the table (Kuzu's index holds them all).

Kuzu keeps its average length as a running mean, so scores agree to the last few bits, not
bit for bit; equal scores are taken in the order the rows were first indexed.
"""
from __future__ import annotations

import math
import re
from array import array

import numpy as np

K1, B = 1.2, 0.75
_IGNORE = re.compile(r"[0-9!@#$%^&*()_+={}\[\]:;<>,.?~/\\|'\"`-]+")   # Kuzu's default, for documents

STEMS_QUERY = "UNWIND $words AS w RETURN w AS word, stem(w, 'english') AS stem"


def words(text: str | None, pattern: re.Pattern = _IGNORE) -> list[str]:
    """A text's words as Kuzu's full-text index splits them (before stop words and stems)."""
    return [w for w in pattern.sub(" ", text).lower().split(" ") if w] if text else []


class WordIndex:
    """The rows' terms: uuid → slot; per term, the slots holding it and how often."""

    def __init__(self, stopwords: frozenset[str], stems: dict[str, str] | None = None):
        self.stopwords = stopwords
        # word -> Kuzu's stem; `stems`: a dict other indexes share (a word is stemmed once)
        self.stems: dict[str, str] = {} if stems is None else stems
        self.slot: dict[str, int] = {}      # uuid -> slot (kept when the row is rewritten)
        self.uuids: list[str] = []
        self.lens = array("d")              # per slot: its length (0 when removed)
        self.doc: list[tuple[int, ...] | None] = []     # per slot: its distinct term ids
        self.term: dict[str, int] = {}
        self.slots: list[array] = []        # per term: the live slots holding it
        self.tfs: list[array] = []          # and how often
        self.total = 0.0                    # the live rows' lengths
        self.live = 0
        self.waiting: dict[str, list[list[str]]] = {}   # uuid -> its texts' words, until stemmed

    def __len__(self) -> int:
        return self.live

    def __contains__(self, uuid: str) -> bool:
        s = self.slot.get(uuid)
        return uuid in self.waiting or s is not None and self.doc[s] is not None

    # ── documents ──────────────────────────────────────────────────────────────────────
    def put(self, uuid: str, texts: list[str | None]) -> None:
        """Index a row's two texts: at once if every word's stem is known, else
        once `stemmed` has them (see `unknown`)."""
        split = [[w for w in words(t) if w not in self.stopwords] for t in texts]
        self.remove(uuid)
        if all(w in self.stems for ws in split for w in ws):
            self._index(uuid, [self.stems[w] for ws in split for w in ws])
        else:
            self.waiting[uuid] = split

    def unknown(self) -> list[str]:
        """The words waiting for their stem."""
        return list({w for split in self.waiting.values() for ws in split for w in ws
                     if w not in self.stems})

    def stemmed(self, stems: dict[str, str]) -> None:
        """Kuzu's stems of `unknown()`: the waiting rows whose stems are all known now
        are indexed (a row put meanwhile may still wait)."""
        self.stems |= stems
        for uuid, split in list(self.waiting.items()):
            if all(w in self.stems for ws in split for w in ws):
                del self.waiting[uuid]
                self._index(uuid, [self.stems[w] for ws in split for w in ws])

    def remove(self, uuid: str) -> None:
        self.waiting.pop(uuid, None)
        s = self.slot.get(uuid)
        if s is None or self.doc[s] is None:
            return
        for t in self.doc[s]:
            i = self.slots[t].index(s)
            del self.slots[t][i], self.tfs[t][i]
        self.total -= self.lens[s]
        self.live -= 1
        self.doc[s], self.lens[s] = None, 0.0

    def _index(self, uuid: str, stems: list[str]) -> None:
        s = self.slot.get(uuid)
        if s is None:
            s = self.slot[uuid] = len(self.uuids)
            self.uuids.append(uuid)
            self.lens.append(0.0)
            self.doc.append(None)
        counts: dict[int, int] = {}
        for st in stems:
            if not st:
                continue
            t = self.term.get(st)
            if t is None:
                t = self.term[st] = len(self.slots)
                self.slots.append(array("i"))
                self.tfs.append(array("i"))
            counts[t] = counts.get(t, 0) + 1
        for t, n in counts.items():
            self.slots[t].append(s)
            self.tfs[t].append(n)
        length = sum(counts.values())
        self.doc[s], self.lens[s] = tuple(counts), float(length)
        self.total += length
        self.live += 1

    # ── search ─────────────────────────────────────────────────────────────────────────
    @staticmethod
    def query_words(query: str) -> list[str]:
        """A query's distinct words (`*` and `?` split words as any punctuation: a bank has
        no Kuzu full-text index that would expand them as wildcards)."""
        return list(dict.fromkeys(words(query)))

    def top(self, stems: list[str], limit: int) -> list[tuple[str, float]]:
        """The best `limit` rows for a query's stems, best first, equal scores in slot
        order: (uuid, score)."""
        n = self.live
        if n == 0 or limit <= 0:
            return []
        avg = self.total / n
        lens = np.frombuffer(self.lens, dtype=np.float64)
        acc = np.zeros(len(lens))
        reached = []
        for st in dict.fromkeys(stems):
            t = self.term.get(st)
            if t is None or not self.slots[t]:
                continue
            slots = np.frombuffer(self.slots[t], dtype=np.int32)
            tf = np.frombuffer(self.tfs[t], dtype=np.int32).astype(np.float64)
            df = len(slots)
            idf = math.log10((n - df + 0.5) / (df + 0.5) + 1)
            acc[slots] += idf * (tf * (K1 + 1) / (tf + K1 * (1 - B + B * (lens[slots] / avg))))
            reached.append(slots)
        if not reached:
            return []
        hits = np.unique(np.concatenate(reached)) if len(reached) > 1 else np.sort(reached[0])
        hits = hits[np.argsort(-acc[hits], kind="stable")[:limit]]
        return [(self.uuids[s], float(acc[s])) for s in hits.tolist()]
