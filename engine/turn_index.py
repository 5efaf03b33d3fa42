"""The stored turns as a search index of their own: BM25 over each turn's words and over its
user message, the cosine of the embedder between the query and the user message, and the
best cosine between the query and one sentence of the assistant's reply.

Measured on LongMemEval's dev split (issue 18, docs/PERFORMANCE.md): the user's own words
are where the answer to "what did I say about …" lives, and keywords find the names and
rare words the embedder blurs. A reply runs to ~23 sentences, and the one that answers
"which book did you suggest" (or restates the user's "I use Premiere Pro") is lost in the
vector of the whole reply, not in its own. The four signals are standardised over the bank's
turns and summed with weights chosen by cross-validation (WEIGHTS; ASSISTANT_WEIGHTS when
the query asks what the assistant said). Words are matched by their singular ("doctors"
finds "doctor"), and the query's vector is moved towards its best few turns before the
cosine is taken again (pseudo-relevance feedback, PRF_TURNS and PRF_WEIGHT): what surrounds
the thing asked about finds the other turns about it ("how many rare items" finds the coins
and the records).

Two more terms come from the turns' times: a turn dated when the query points to ("four
weeks ago") gains DATE_WEIGHT, and every turn gains a share of the best turn of its
conversation (turns less than CONVERSATION_GAP apart): the turn before or after a strong one
often holds the detail asked for. A question that adds up, compares or orders occasions
("how many … in total", "which came first") spreads its turns over conversations instead
(SPREAD): its evidence is one turn in each of several.

From SCALE_FROM turns on, a search scores only its candidates (turn_lists.py): the best
keyword hits and the turns nearest the query's meaning, with the spreads of every turn.

Kept in memory, built from the bank on its first search and kept in step with every write
and removal: it holds no text (token counts and vectors). Each turn's vectors are also kept
on the turn's own row in the bank (pack_vectors), so that opening a bank embeds nothing again
(an API embedder was asked for every turn at each start); a forgotten turn's row goes, and
its vectors with it.
"""
from __future__ import annotations

import base64
import binascii
import math
import struct
import zlib
from array import array
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Iterable

import numpy as np

from memoryplus.common.text import keyword_tokens, split_sentences, stem
from memoryplus.engine.embedders import embed_rows, sentence_embedder
from memoryplus.engine.turn_lists import KEYWORD_CANDIDATES, SCALE_FROM, TurnLists
from memoryplus.engine.turn_texts import TurnTexts

_stem = lru_cache(maxsize=65536)(stem)


def tokens(text: str) -> list[str]:
    """The baseline's own tokens and stop words (cli/bench_recall.py), each by its singular."""
    return [_stem(w) for w in keyword_tokens(text)]


# bm25 over the whole turn, bm25 over the user message, cosine to the user message, and the
# best cosine to a sentence of the assistant's reply
WEIGHTS = (1.0, 0.5, 3.0, 0.5)        # scripts/recall_weights.py: 5-fold CV on the dev split
# "the restaurant you recommended": the user's message is the question, the answer is in the
# assistant's reply, which the whole turn's keywords and the reply's sentences see
ASSISTANT_WEIGHTS = (1.0, 0.0, 0.0, 0.5)
# The reply's sentences are kept as the first REPLY_DIM dimensions of their vectors (the offline
# embedder is trained to be cut there), renormalised, in bytes: 64 bytes a sentence; a reply
# has ~23 on the dev split. At most MAX_REPLY_SENTENCES of a reply are kept.
REPLY_DIM, MAX_REPLY_SENTENCES = 64, 200
# a turn dated where the query points ("four weeks ago"): a bell over the turns' dates, its
# width a quarter of how far back (at least a day): "a week ago" is not to the hour
DATE_WEIGHT, DATE_SPREAD = 4.0, 0.25
# each turn gains this share of the best score in its conversation (turns of one sitting)
CONVERSATION_WEIGHT = 0.2
CONVERSATION_GAP = 3600.0       # seconds between two turns that start a new conversation
# A turn is a candidate at all only when it shares a word with the query or its user message
# is this close to it (the relevance floor: a bank where nothing matches returns no turn)
COSINE_FLOOR = 0.35
# A word of the query's word families ("manager" for "boss", extract/query.family_words)
# counts this much of a word of the query itself in both BM25 signals
RELATED_WEIGHT = 0.5
# The query's vector plus PRF_WEIGHT × the mean vector of its PRF_TURNS best turns, for a
# second cosine (not for a question about what the assistant said: its user messages are
# the user's questions of then)
PRF_TURNS, PRF_WEIGHT = 3, 1.0
# A question whose answer adds up, compares or orders several occasions ("how many … in
# total", "which came first"): each turn loses SPREAD for every better-scored turn of its own
# conversation, so that other conversations' turns come up (one conversation's turns, lifted
# by the conversation's share, filled the results with one occasion). 5-fold CV of the whole
# engine on the dev split over 0, 0.5, 1, 2, 3, 4: scripts/recall_spread.py, docs/PERFORMANCE.md
SPREAD = 1.0
K1, B = 1.5, 0.75
REPLY_CHUNK = 65536     # sentence rows turned into floats at once (16 MB)


def split_body(body: str) -> tuple[str, str]:
    """(user, assistant) from an episode's 'User: …' / 'Assistant: …' text (Turn.body)."""
    user: list[str] = []
    asst: list[str] = []
    part = user
    for line in (body or "").splitlines():
        if line.startswith("User: "):
            part, line = user, line[6:]
        elif line.startswith("Assistant: "):
            part, line = asst, line[11:]
        part.append(line)
    return "\n".join(user), "\n".join(asst)


def reply_sentences(body: str) -> list[str]:
    """The sentences of the turn's assistant reply that the index keeps a vector of."""
    return split_sentences(split_body(body)[1])[:MAX_REPLY_SENTENCES]


def reply_vectors(bank_embedder, body: str) -> np.ndarray | None:
    """The vectors of the reply's sentences (TurnIndex.add), by sentence_embedder."""
    by = sentence_embedder(bank_embedder)
    return None if by is None else embed_rows(by, reply_sentences(body), REPLY_DIM)


def reply_query(bank_embedder, query: str, query_vector=None) -> np.ndarray | None:
    """The query's vector for the reply signal (TurnIndex.search's `reply_vector`). When the
    bank's own embedder embeds the sentences, `query_vector` (the bank's vector of `query`)
    is it already: compact_query keeps its first REPLY_DIM dimensions."""
    by = sentence_embedder(bank_embedder)
    if by is None:
        return None
    if by is bank_embedder and query_vector is not None:
        return np.asarray(query_vector, np.float32)
    return embed_rows(by, [query], REPLY_DIM)[0]


def compact(vectors) -> np.ndarray:
    """Sentence vectors as the index keeps them: the first REPLY_DIM dimensions, renormalised,
    as signed bytes (one row each; none: no row; rows compact already pass as they are)."""
    if vectors is None or not len(vectors):
        return np.zeros((0, REPLY_DIM), np.int8)
    if isinstance(vectors, np.ndarray) and vectors.dtype == np.int8:
        return vectors
    v = np.asarray(vectors, np.float32)[:, :REPLY_DIM]
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)
    return np.round(v * 127).astype(np.int8)


# A turn's vectors on its row (Episodic.turn_vectors): base64 of a header (format, a tag of
# the two embedders that made them, the user vector's size, the reply's rows and their
# width), the user message's vector in float32, then the reply's compact rows.
_PACKED = struct.Struct("<2sIHHB")
_FORMAT = b"T1"


def vectors_tag(bank_embedder_id: str, bank_embedder) -> int:
    """Which embedders a turn's vectors come from: the bank's (its manifest id) and the reply
    sentences' (sentence_embedder). Vectors of any other pair are embedded again."""
    by = sentence_embedder(bank_embedder)
    return zlib.crc32(f"{bank_embedder_id}|{type(by).__name__ if by else '-'}".encode())


def pack_vectors(tag: int, user_vector, replies) -> str:
    """A turn's vectors as its row keeps them: the user message's and the reply's sentences'
    (compact() rows or vectors; none: no rows)."""
    v = np.asarray(user_vector, np.float32)
    rows = compact(replies)
    head = _PACKED.pack(_FORMAT, tag, len(v), len(rows), rows.shape[1])
    return base64.b64encode(head + v.tobytes() + rows.tobytes()).decode("ascii")


def unpack_vectors(text: str | None, tag: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(user vector, compact reply rows) from pack_vectors' text; None when there is none,
    it is damaged, or other embedders made it (`tag`)."""
    if not text:
        return None
    try:
        raw = base64.b64decode(text, validate=True)
        fmt, got, dim, n, width = _PACKED.unpack_from(raw)
    except (binascii.Error, struct.error, ValueError):
        return None
    start = _PACKED.size + 4 * dim
    if fmt != _FORMAT or got != tag or len(raw) != start + width * n:
        return None
    return (np.frombuffer(raw, np.float32, dim, _PACKED.size).copy(),
            np.frombuffer(raw, np.int8, width * n, start).reshape(n, width).copy())


def compact_query(vector) -> np.ndarray:
    v = np.asarray(vector, np.float32)[:REPLY_DIM]
    return v / max(float(np.linalg.norm(v)), 1e-9) / 127


class _Field:
    """BM25 statistics of one field over the live documents, kept compact: each word's
    postings are one array of (document, count) pairs in document order, and the documents'
    words one array of word ids in document order, each document's run found by its first
    and its count (both fields of a dev turn: ~2.5 KB, against ~8 KB as dicts of dicts; one
    array per document held 4 MB more of the heap at 20,320 turns). A word no live
    document has is dropped, text and all."""

    def __init__(self):
        self.ids: dict[str, int] = {}           # word -> its id (an index into postings)
        self.postings: list[array] = []         # id -> document, count, document, count …
        self.vocab: list[str | None] = []       # id -> its word (None: dropped)
        self.free: list[int] = []               # ids of dropped words, for new words
        self.word_ids = array("i")              # every document's word ids, in document order
        self.first = _Column(np.int64)          # document -> where its run starts in word_ids
        self.runs = _Column(np.int32)           # document -> its number of word ids + 1 (0: not live)
        self.lengths = _Column(np.float64)      # document -> its number of words (0: none, or removed)
        self.live = 0
        self.total = 0

    def __contains__(self, word: str) -> bool:
        return word in self.ids

    def add(self, doc: int, words: list[str]) -> None:
        """A new document: `doc` above every document added before (postings stay sorted)."""
        counts = Counter(words)
        mine = array("i")
        for w, n in counts.items():
            i = self.ids.get(w)
            if i is None:
                i = self.ids[w] = self.free.pop() if self.free else len(self.postings)
                if i == len(self.postings):
                    self.postings.append(array("i"))
                    self.vocab.append(w)
                self.vocab[i] = w
            self.postings[i].extend((doc, n))
            mine.append(i)
        self.first.put(doc, len(self.word_ids))
        self.runs.put(doc, len(mine) + 1)
        self.word_ids.extend(mine)
        self.lengths.put(doc, len(words))
        self.live += 1
        self.total += len(words)

    def remove(self, doc: int) -> None:
        """A document no longer live (its run stays in word_ids, unread, until the index is
        built again: documents are not added twice, a turn stored again takes a new slot)."""
        if doc >= self.runs.used or not self.runs.view()[doc]:
            return
        self.total -= int(self.lengths.view()[doc])
        self.lengths.view()[doc] = 0
        start, run = int(self.first.view()[doc]), int(self.runs.view()[doc]) - 1
        self.runs.view()[doc] = 0
        self.live -= 1
        for i in self.word_ids[start:start + run]:
            p = self.postings[i]
            at = 2 * int(np.searchsorted(np.frombuffer(p, np.int32)[::2], doc))
            del p[at:at + 2]
            if not p:
                del self.ids[self.vocab[i]]
                self.vocab[i] = None
                self.free.append(i)

    def scores(self, terms: list[str], size: int) -> np.ndarray:
        """BM25 of `terms` per slot (`size` of them)."""
        out = np.zeros(size)
        for docs, x in self._term_scores(terms):
            out[docs] += x
        return out

    def _term_scores(self, terms: list[str]):
        """(documents, BM25 of the word) for each word of `terms` that a live document has."""
        n = self.live
        if not n:
            return
        average = self.total / n or 1.0
        for w in terms:
            i = self.ids.get(w)
            if i is None:
                continue
            pairs = np.frombuffer(self.postings[i], np.int32)
            docs, tf = pairs[::2], pairs[1::2].astype(np.float64)
            idf = math.log(1 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
            norm = K1 * (1 - B + B * self.lengths.view()[docs] / average)
            yield docs, idf * tf * (K1 + 1) / (tf + norm)


class _Column:
    """One value per slot in a buffer that grows by half when full: kept in step with each
    write, where an array built anew from a list of every slot after each write cost the
    search right after a stored turn ~1 ms apiece at 20,000 turns."""

    def __init__(self, dtype):
        self.buf = np.zeros(0, dtype)
        self.used = 0

    def view(self) -> np.ndarray:
        return self.buf[:self.used]

    def put(self, at: int, value) -> None:
        """`value` at slot `at`; slots between the last used one and `at` are zero."""
        if at >= len(self.buf):
            grown = np.zeros(max(at + 1, 64, len(self.buf) * 3 // 2), self.buf.dtype)
            grown[:self.used] = self.buf[:self.used]
            self.buf = grown
        self.buf[at] = value
        self.used = max(self.used, at + 1)


class _Rows:
    """A matrix that grows by rows in one buffer (its capacity by half when full), for a
    search to multiply as it is: one array per turn, stacked anew after each write, held
    every vector twice."""

    def __init__(self, width: int, dtype):
        self.buf = np.zeros((0, width), dtype)
        self.used = 0

    @property
    def width(self) -> int:
        return self.buf.shape[1]

    def view(self) -> np.ndarray:
        return self.buf[:self.used]

    def append(self, rows: np.ndarray) -> None:
        """`rows` stored after the others. The first rows set the width (the embedder's own,
        whatever the index was made with)."""
        if not len(rows):
            return
        if rows.shape[1] != self.width and not self.used:
            self.buf = np.zeros((0, rows.shape[1]), self.buf.dtype)
        at, need = self.used, self.used + len(rows)
        if need > len(self.buf):
            grown = np.zeros((max(need, 64, len(self.buf) * 3 // 2), self.width), self.buf.dtype)
            grown[:at] = self.buf[:at]
            self.buf = grown
        self.buf[at:need] = rows
        self.used = need

    def keep(self, rows: np.ndarray) -> None:
        """Only the rows where `rows` (a mask of the used rows) is true are left, in their order;
        nothing of the others is kept."""
        kept = int(rows.sum())
        self.buf[:kept] = self.view()[rows]
        self.buf[kept:self.used] = 0
        self.used = kept


def _live_at(live: np.ndarray):
    """Where the live turns are: every slot (a view, no copy by mask) when all are live."""
    return slice(None) if live.all() else live


@dataclass
class TurnIndex:
    dim: int
    uuids: list[str | None] = field(default_factory=list)       # slot -> episode uuid (None: removed)
    # slot -> its Episodic name (the turn's metadata, episodes.EpisodeMeta): a search's results
    # name their turns without a read by uuid, which Kuzu 0.11.3 answers by scanning every turn
    names: list[str | None] = field(default_factory=list)
    # slot -> (valid_at, entity_edges) as stored (None: not known): with the name, what a
    # search's turn hits need of their rows, so that only the text of those it shows is read
    # (a read by key costs Kuzu ~0.3 ms: ten a search were 5.6 of 12.7 ms at 20,000 turns)
    rows: list[tuple[datetime | None, tuple[str, ...]] | None] = field(default_factory=list)
    slot: dict[str, int] = field(default_factory=dict)
    # slot -> the turn's text, in a file (turn_texts.py); None: a search reads those it shows
    texts: TurnTexts | None = None
    _conversations: _Column | None = None           # conversations(), kept while turns come in order
    _reply_layout: tuple[np.ndarray, np.ndarray] | None = None  # reply_layout()

    def __post_init__(self):
        self.turn = _Field()
        self.user = _Field()
        self._stored = _Column(bool)                    # slot -> its turn is stored (not removed)
        self._times = _Column(np.float64)               # slot -> valid_at (epoch seconds)
        self._reply_count = _Column(np.int64)           # slot -> its reply's sentences
        self._text_at = _Column(np.int64)               # slot -> where its text is in `texts`
        self._text_size = _Column(np.int64)             # slot -> its bytes there (0: none)
        self._users = _Rows(self.dim, np.float32)      # slot -> the user message's vector
        self._replies = _Rows(REPLY_DIM, np.int8)       # the reply sentences' rows, slot after slot
        self._lists: TurnLists | None = None            # at scale (turn_lists.py), from its first search
        self._reply_sample = None                       # its sample's reply rows (_reply_rows), in one block

    def __len__(self) -> int:
        return len(self.slot)

    def add(self, uuid: str, body: str, when: datetime | None, user_vector, reply_vectors=None,
            name: str | None = None, facts: Iterable[str] | None = None) -> None:
        """A stored turn: its text, time, the vector of its user message and those of its
        reply's sentences (reply_sentences(body), embedded; none: no reply signal for it),
        its row's name and the uuids of its facts (entity_edges) as stored (None: read from
        the bank when needed)."""
        if uuid in self.slot:
            self.remove([uuid])
        user, asst = split_body(body)
        i = len(self.uuids)
        self.uuids.append(uuid)
        self.names.append(name)
        self.rows.append(None if name is None or facts is None else (when, tuple(facts)))
        t = when.timestamp() if when else 0.0
        self._follow_conversations(t)
        self._times.put(i, t)
        self._stored.put(i, True)
        self.slot[uuid] = i
        self.turn.add(i, tokens(f"{user} {asst}"))
        self.user.add(i, tokens(user))
        if self.texts is not None:
            at, size = self.texts.put(body)
            self._text_at.put(i, at)
            self._text_size.put(i, size)
        v = np.asarray(user_vector if user_vector is not None else np.zeros(self.dim), dtype=np.float32)
        self.dim = len(v)
        self._users.append(v[None, :])
        if self._lists is not None:
            self._lists.add(i, v)
        replies = compact(reply_vectors)
        self._replies.append(replies)
        self._reply_count.put(i, len(replies))
        self._reply_layout = None

    def _follow_conversations(self, t: float) -> None:
        """The kept conversations() for a new slot dated `t`: a turn dated after every other
        (as chat turns come) continues the last conversation or starts the next, as the sort
        would number it; any other is numbered by the next sort."""
        conv, times = self._conversations, self._times.view()
        if conv is None or not len(times) or t < times.max():
            self._conversations = None
            return
        last = conv.view()[len(times) - 1 - int(np.argmax(times[::-1]))]
        conv.put(len(times), last + (t - times.max() > CONVERSATION_GAP))

    def name(self, uuid: str) -> str | None:
        """The stored name of a turn in the index (None: not in it, or not known)."""
        i = self.slot.get(uuid)
        return None if i is None else self.names[i]

    def known_rows(self, uuids: Iterable[str]) -> dict[str, dict]:
        """Of these turns, those whose row the index knows: their uuid, name, valid_at and
        entity_edges as the bank holds them (not their text)."""
        out = {}
        for u in uuids:
            i = self.slot.get(u)
            row = None if i is None else self.rows[i]
            if row is not None and self.names[i] is not None:
                out[u] = {"uuid": u, "name": self.names[i], "valid_at": row[0], "entity_edges": list(row[1])}
        return out

    def text(self, uuid: str) -> str | None:
        """A stored turn's text as the bank holds it, if the index keeps a copy (texts)."""
        i = self.slot.get(uuid)
        if i is None or self.texts is None or i >= self._text_size.used:
            return None
        return self.texts.get(int(self._text_at.view()[i]), int(self._text_size.view()[i]))

    def reply_rows(self, uuid: str) -> np.ndarray | None:
        """The compact vectors of a stored turn's reply sentences (compact()), one row per
        sentence of reply_sentences(body); None for a turn the index does not hold."""
        i = self.slot.get(uuid)
        if i is None:
            return None
        first = self.reply_layout()[0][i]
        return self._replies.view()[first:first + self._reply_count.view()[i]].copy()

    def reply_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """Per slot, the first row of its reply's sentences; and the slots that have some."""
        if self._reply_layout is None:
            counts = self._reply_count.view()
            self._reply_layout = (np.cumsum(counts) - counts, np.flatnonzero(counts))
        return self._reply_layout

    def remove(self, uuids) -> None:
        rows = np.ones(self._replies.used, bool)      # the reply rows left
        for u in uuids:
            i = self.slot.pop(u, None)
            if i is None:
                continue
            self.uuids[i] = self.names[i] = self.rows[i] = None
            self._stored.view()[i] = False
            self.turn.remove(i)
            self.user.remove(i)
            if self.texts is not None and i < self._text_size.used:
                self.texts.erase(int(self._text_at.view()[i]), int(self._text_size.view()[i]))
                self._text_size.view()[i] = 0
            if self._lists is not None:
                self._lists.remove(self._users.view()[i])
            self._users.view()[i] = 0
            first = self.reply_layout()[0][i]
            rows[first:first + self._reply_count.view()[i]] = False
        if not rows.all():
            self._replies.keep(rows)
            self._reply_count.view()[~self._stored.view()] = 0
        self._reply_layout = None           # conversations() are kept: a removed slot keeps its time

    def signals(self, query: str, query_vector, until: datetime | None = None,
                related: Iterable[str] = (), reply_vector=None) -> tuple[list[np.ndarray], np.ndarray]:
        """Per slot: BM25 over the turn, BM25 over its user message (the `related` words
        weighed by RELATED_WEIGHT), cosine to its user message, the best cosine of
        `reply_vector` (the query by the reply sentences' embedder) to a sentence of its reply;
        and which slots are live (stored, dated up to `until`)."""
        stored, times = self.slot_arrays()
        live = stored & (times <= until.timestamp()) if until is not None else stored.copy()
        cosine = self._users.view() @ np.asarray(query_vector, dtype=np.float32)
        return self._bm25(query, related) + [cosine, self._reply_cosines(reply_vector)], live

    def _bm25(self, query: str, related: Iterable[str]) -> list[np.ndarray]:
        """Per slot, BM25 over the turn and over its user message: the query's words, and the
        `related` words weighed by RELATED_WEIGHT."""
        terms = tokens(query)
        more = [t for t in dict.fromkeys(tokens(" ".join(related))) if t not in terms]
        n = len(self.uuids)
        return [f.scores(terms, n) + (RELATED_WEIGHT * f.scores(more, n) if more else 0)
                for f in (self.turn, self.user)]

    def slot_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Per slot, whether its turn is stored and its time (epoch seconds): views of the
        kept columns, not to be written to."""
        return self._stored.view(), self._times.view()

    def _reply_cosines(self, reply_vector) -> np.ndarray:
        """Per slot, the best cosine of the query to a sentence of its reply (0 without one)."""
        out = np.zeros(len(self.uuids))
        if reply_vector is None:
            return out
        starts, have = self.reply_layout()
        starts, rows = starts[have], self._replies.view()
        if not len(have):
            return out
        q = compact_query(reply_vector)
        cos = np.empty(len(rows), np.float32)
        for first in range(0, len(rows), REPLY_CHUNK):     # bytes to floats a chunk at a time
            cos[first:first + REPLY_CHUNK] = rows[first:first + REPLY_CHUNK].astype(np.float32) @ q
        out[have] = np.maximum.reduceat(cos, starts)
        return out

    def conversations(self) -> np.ndarray:
        """Per slot, the number of its conversation: turns by time, a new one after a gap of
        more than CONVERSATION_GAP (a removed slot keeps its time: it is never live)."""
        if self._conversations is None:
            t = self.slot_arrays()[1]
            order = np.argsort(t, kind="stable")
            starts = np.concatenate([[0], (np.diff(t[order]) > CONVERSATION_GAP).astype(np.int64)])
            self._conversations = _Column(np.int64)
            if len(t):
                self._conversations.put(len(t) - 1, 0)
                self._conversations.view()[order] = np.cumsum(starts)
        return self._conversations.view()

    def near(self, when: datetime, days: float) -> np.ndarray:
        """Per slot, 1 for a turn dated `when`, falling off over DATE_SPREAD × `days`."""
        spread = max(1.0, DATE_SPREAD * days) * 86400.0
        t = self.slot_arrays()[1]
        return np.exp(-0.5 * ((t - when.timestamp()) / spread) ** 2)

    @staticmethod
    def shares(signals: list[np.ndarray], live: np.ndarray, weights) -> list[np.ndarray | None]:
        """Each signal standardised over the live turns and weighed (None: no spread), one
        value per live turn."""
        at = _live_at(live)
        out: list[np.ndarray | None] = []
        for w, s in zip(weights, signals):
            x = s[at]
            sd = x.std() if len(x) else 0.0
            out.append(w * (x - x.mean()) / sd if sd > 0 else None)
        return out

    @staticmethod
    def fuse(signals: list[np.ndarray], live: np.ndarray, weights=WEIGHTS,
             near: np.ndarray | None = None, conversations: np.ndarray | None = None,
             shares: list[np.ndarray | None] | None = None) -> np.ndarray:
        """The signals standardised over the live turns and summed with `weights` (`shares`
        when given: computed already), plus DATE_WEIGHT × `near` and the conversation's share;
        -inf for turns that are not live or below the relevance floor."""
        at = _live_at(live)
        total = np.zeros(len(live))
        for share in TurnIndex.shares(signals, live, weights) if shares is None else shares:
            if share is not None:
                total[at] += share
        total += 1e-6 * signals[2]          # a bank of one turn has no spread: cosine decides
        if near is not None:
            total += DATE_WEIGHT * near
        if conversations is not None and live.any():
            total[at] = TurnIndex._with_conversations(total[at], conversations[at])
        total[~(live & ((signals[0] > 0) | (signals[2] >= COSINE_FLOOR)))] = -np.inf
        return total

    def ranking(self, signals: list[np.ndarray], live: np.ndarray, query_vector, weights,
                near: np.ndarray | None, conversations: np.ndarray | None, *,
                feedback: bool = True) -> np.ndarray:
        """The fused score per slot (fuse), ranked a second time with the cosine to the query's
        vector moved towards its PRF_TURNS best turns when `feedback` (pseudo-relevance
        feedback). `signals` is left as it was (the weights script reuses them)."""
        shares = self.shares(signals, live, weights)
        total = self.fuse(signals, live, weights, near, conversations, shares)
        k = min(PRF_TURNS, int(np.isfinite(total).sum())) if feedback else 0
        if not k:
            return total
        best = np.argpartition(-total, k - 1)[:k]       # finite: there are at least k of them
        users = self._users.view()
        cosine = users @ self._moved(query_vector, users[best])
        again = [*signals[:2], cosine, *signals[3:]]     # only the cosine's share changes
        shares[2:3] = self.shares(again[2:3], live, weights[2:3])
        return self.fuse(again, live, weights, near, conversations, shares)

    @staticmethod
    def _with_conversations(total: np.ndarray, conversations: np.ndarray) -> np.ndarray:
        """`total` plus CONVERSATION_WEIGHT × the best score of each turn's conversation."""
        best = np.full(int(conversations.max()) + 1, -np.inf)
        np.maximum.at(best, conversations, total)
        return total + CONVERSATION_WEIGHT * best[conversations]

    @staticmethod
    def _moved(query_vector, best_users: np.ndarray) -> np.ndarray:
        """The query's vector moved towards its best turns' user vectors (PRF_WEIGHT), unit."""
        moved = np.asarray(query_vector, dtype=np.float32) + PRF_WEIGHT * best_users.mean(axis=0)
        norm = float(np.linalg.norm(moved))
        return (moved / norm if norm > 0 else moved).astype(np.float32)

    @staticmethod
    def spread(total: np.ndarray, conversations: np.ndarray, penalty: float) -> np.ndarray:
        """`total` less `penalty` for every better (finite) score of the same conversation."""
        ok = np.flatnonzero(np.isfinite(total))
        if not len(ok) or not penalty:
            return total
        order = ok[np.lexsort((-total[ok], conversations[ok]))]     # by conversation, best first
        conv = conversations[order]
        starts = np.flatnonzero(np.concatenate([[True], conv[1:] != conv[:-1]]))
        within = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
        out = total.copy()
        out[order] -= penalty * within
        return out

    def search(self, query: str, query_vector, limit: int, until: datetime | None = None,
               related: Iterable[str] = (), *, to_assistant: bool = False,
               pointed: tuple[datetime, float] | None = None,
               reply_vector=None, several: bool = False) -> list[tuple[str, float]]:
        """The best `limit` turns (episode uuid, fused score), best first; only turns dated up
        to `until` when given, and only those above the relevance floor. A score is a sum of
        standardised signals (how far the turn stands out from the bank's turns).
        `to_assistant`: the query asks what the assistant said (ASSISTANT_WEIGHTS);
        `pointed`: (when, days back) of a time the query points to ("two weeks ago");
        `reply_vector`: the query embedded as the reply sentences were; `several`: the answer
        adds up several occasions (SPREAD)."""
        if not self.slot or not limit:
            return []
        weights = ASSISTANT_WEIGHTS if to_assistant else WEIGHTS
        if len(self.slot) >= SCALE_FROM and until is None and pointed is None:
            return self._search_candidates(query, query_vector, limit, related, weights,
                                           not to_assistant, reply_vector, several)
        signals, live = self.signals(query, query_vector, until, related, reply_vector)
        total = self.ranking(signals, live, query_vector, weights, self.near(*pointed) if pointed else None,
                             self.conversations(), feedback=not to_assistant)
        if several:
            total = self.spread(total, self.conversations(), SPREAD)
        return self._best(np.arange(len(total)), total, limit)

    def _best(self, slots: np.ndarray, total: np.ndarray, limit: int) -> list[tuple[str, float]]:
        """The `limit` best of `slots` by `total` (theirs, in order), best first; none at -inf."""
        k = min(limit, int(np.isfinite(total).sum()))
        if not k:
            return []
        top = np.argpartition(-total, k - 1)[:k]
        top = top[np.argsort(-total[top], kind="stable")]
        return [(self.uuids[slots[i]], float(total[i])) for i in top]

    def _search_candidates(self, query: str, query_vector, limit: int, related: Iterable[str],
                           weights, feedback: bool, reply_vector, several: bool) -> list[tuple[str, float]]:
        """search() in a big bank, over candidates (turn_lists.py): the ranking's own terms and
        spreads, but scored only for the turns that can make its best. Every stored turn is
        live (no `until`, no `pointed`)."""
        stored = self._stored.view()
        if self._lists is None or len(self.slot) > 2 * self._lists.trained_on:
            self._lists = TurnLists(self._users.view(), stored)     # ~0.2 s at 20,000 turns
            # the sample's reply rows in one block: read by every search, gathered once
            self._reply_sample = (self._lists.sample, *self._reply_rows(self._lists.sample))
        lists, n, users, size = self._lists, len(self.slot), self._users.view(), len(self.uuids)
        keyword, worded, hit = self._keyword_shares(query, related, weights)
        replies = None      # (per slot: its reply signal, nan until needed; the mean; the spread)
        if reply_vector is not None and weights[3]:
            sampled, *rows = self._reply_sample
            sample = self._best_reply(len(sampled), *rows, reply_vector)[stored[sampled]]
            if len(sample) and sample.std() > 0:
                replies = (np.full(len(self.uuids), np.nan), sample.mean(), sample.std())
        conversations = self.conversations()

        def among(*parts: np.ndarray) -> np.ndarray:
            """The stored slots of `parts`, in order."""
            mark = np.zeros(size, bool)
            for p in parts:
                mark[p] = True
            return np.flatnonzero(mark & stored)

        def fused(slots: np.ndarray, vector: np.ndarray, cos: np.ndarray) -> np.ndarray:
            total = keyword[slots]
            mean, sd = lists.cosine_spread(vector, n)
            if weights[2] and sd > 0:
                total = total + weights[2] * (cos - mean) / sd
            if replies is not None:
                best_reply, reply_mean, reply_sd = replies
                todo = slots[np.isnan(best_reply[slots])]
                best_reply[todo] = self._best_reply(len(todo), *self._reply_rows(todo), reply_vector)
                total = total + weights[3] * (best_reply[slots] - reply_mean) / reply_sd
            total = total + 1e-6 * cos
            total = self._with_conversations(total, conversations[slots])
            total[~(worded[slots] | (cos >= COSINE_FLOOR))] = -np.inf
            return total

        vector = np.asarray(query_vector, dtype=np.float32)
        slots = among(hit, lists.near(vector))
        if not len(slots):
            return []
        rows = users[slots]
        total = fused(slots, vector, rows @ vector)
        k = min(PRF_TURNS, int(np.isfinite(total).sum())) if feedback else 0
        if k:
            best = slots[np.argpartition(-total, k - 1)[:k]]
            vector = self._moved(vector, users[best])
            more_slots = among(slots, lists.near(vector))
            cos = np.empty(len(more_slots), np.float32)
            again = np.searchsorted(more_slots, slots)       # the slots scored already (rows)
            new = np.ones(len(more_slots), bool)
            new[again] = False
            cos[again] = rows @ vector
            cos[new] = users[more_slots[new]] @ vector
            slots = more_slots
            total = fused(slots, vector, cos)
        if several:
            total = self.spread(total, conversations[slots], SPREAD)
        return self._best(slots, total, limit)

    def _keyword_shares(self, query: str, related: Iterable[str], weights) -> tuple[np.ndarray, ...]:
        """Per slot, the two BM25 signals' weighed shares summed (as shares() gives them, the
        spread over every stored turn) and whether the turn has a word of the query (the
        relevance floor); and the KEYWORD_CANDIDATES best slots by that sum among those with
        a word of the query in either field."""
        n = len(self.slot)
        bm25 = self._bm25(query, related)
        keyword = np.zeros(len(self.uuids))
        for x, w in zip(bm25, weights):
            mean = x.sum() / n              # a removed turn's BM25 is 0: the sums are the live turns'
            sd = math.sqrt(max(float(x @ x) / n - mean * mean, 0.0))
            if w and sd > 0:
                keyword += w * (x - mean) / sd
        worded = bm25[0] > 0
        hit = np.flatnonzero(worded | (bm25[1] > 0))
        if len(hit) > KEYWORD_CANDIDATES:
            hit = hit[np.argpartition(-keyword[hit], KEYWORD_CANDIDATES - 1)[:KEYWORD_CANDIDATES]]
        return keyword, worded, hit

    def _reply_rows(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The compact rows of these slots' replies, one slot after another; where each slot
        that has some begins there; and which slots have some."""
        counts = self._reply_count.view()[slots]
        have = np.flatnonzero(counts)
        counts = counts[have]
        begins = np.cumsum(counts) - counts
        rows = np.repeat(self.reply_layout()[0][slots[have]] - begins, counts) + np.arange(counts.sum())
        return self._replies.view()[rows], begins, have

    @staticmethod
    def _best_reply(size: int, rows: np.ndarray, begins: np.ndarray, have: np.ndarray,
                    reply_vector) -> np.ndarray:
        """Per slot of `size` (laid out by _reply_rows), the best cosine of the query to a
        sentence of its reply (0 without one): _reply_cosines for a few slots."""
        out = np.zeros(size)
        if len(have):
            out[have] = np.maximum.reduceat(rows.astype(np.float32) @ compact_query(reply_vector), begins)
        return out
