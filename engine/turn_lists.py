"""What lets a search of a big bank read a few thousand of its turns, not all of them
(TurnIndex.search at SCALE_FROM turns and more).

The turn index's exact ranking standardises each signal over every turn, so it reads every
user vector twice (the query's cosine, then the feedback's) and every reply sentence once: at
20,320 turns ~4.3 of its 4.5 ms, growing with the bank (docs/PERFORMANCE.md, A search that
reads a few thousand turns). At scale, the turns a search scores are its candidates: the
KEYWORD_CANDIDATES best by their BM25 shares, and the turns whose user message lies in the
PROBES lists (k-means clusters of the user vectors, an inverted file) nearest the query's
vector, and then nearest the feedback's moved vector. The spreads stay over every stored
turn: the cosine's mean and spread are exact, from the user vectors' kept sum and sum of
outer products; the reply signal's (a best cosine, no sum gives it) come from a fixed sample
of SPREAD_SAMPLE turns. Measured (PERFORMANCE.md): on the 140 scored dev questions over one
bank of every dev haystack's turns (34,441 real turns, 789,804 reply sentences), the top 10
is the exact ranking's set for 137, any@10 and all@10 unchanged, the turn index's search 17.6
→ 4.7 ms p50; on the bench's 20,320-turn bank, the set for 401 of 431 questions (0.989 of the
turns shared), 4.0 → 1.6 ms.
"""
from __future__ import annotations

import math
from array import array

import numpy as np

SCALE_FROM = 5000           # turns from which a search reads candidates (below: every turn)
PROBES = 16                 # nearest lists read per vector
KEYWORD_CANDIDATES = 200    # best turns by their BM25 shares
SPREAD_SAMPLE = 1024        # turns whose reply signal gives its mean and spread
LISTS_PER_ROOT = 4          # lists: 4 × √turns (570 at 20,000: ~36 turns a list)
_TRAIN_ROWS, _ITERATIONS = 4096, 6      # k-means on a sample, then every turn assigned once
_CHUNK = 4096               # rows per matrix product when assigning and summing outer products


def _nearest(rows: np.ndarray, centroids: np.ndarray, which: np.ndarray | None = None) -> np.ndarray:
    """The nearest centroid of each row (of the rows `which`, read a chunk at a time: no copy
    of a big bank's vectors is made)."""
    which = np.arange(len(rows)) if which is None else which
    out = np.empty(len(which), np.int64)
    for first in range(0, len(which), _CHUNK):
        out[first:first + _CHUNK] = np.argmax(rows[which[first:first + _CHUNK]] @ centroids.T, axis=1)
    return out


class TurnLists:
    """k-means lists of the stored turns' user vectors, their sum and sum of outer products,
    and a fixed sample of stored slots; kept in step with adds and removals. A removed slot
    stays in its list: a search drops it by the stored flags."""

    def __init__(self, users: np.ndarray, stored: np.ndarray, seed: int = 0):
        live = np.flatnonzero(stored)
        rng = np.random.default_rng(seed)          # one bank, one set of lists: repeatable
        self.trained_on = len(live)
        train = users[np.sort(rng.choice(live, min(len(live), _TRAIN_ROWS), replace=False))]
        lists = max(1, min(len(train), int(LISTS_PER_ROOT * math.sqrt(len(live)))))
        centroids = train[rng.choice(len(train), lists, replace=False)].astype(np.float32)
        for _ in range(_ITERATIONS):
            at = _nearest(train, centroids)
            sums = np.zeros_like(centroids)
            np.add.at(sums, at, train)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            full = norms[:, 0] > 0                  # an empty list keeps its centroid
            centroids[full] = sums[full] / norms[full]
        self.centroids = centroids
        at = _nearest(users, centroids, live)
        order = np.argsort(at, kind="stable")
        bounds = np.searchsorted(at[order], np.arange(lists + 1))
        self.members = [array("i", live[order[bounds[k]:bounds[k + 1]]].tolist()) for k in range(lists)]
        self.sum = np.zeros(users.shape[1])
        self.outer = np.zeros((users.shape[1], users.shape[1]))
        for first in range(0, len(live), _CHUNK):
            rows = users[live[first:first + _CHUNK]].astype(np.float64)
            self.sum += rows.sum(axis=0)
            self.outer += rows.T @ rows
        self.sample = np.sort(rng.choice(live, min(len(live), SPREAD_SAMPLE), replace=False))

    def add(self, slot: int, vector: np.ndarray) -> None:
        self.members[int(np.argmax(self.centroids @ vector))].append(slot)
        v = vector.astype(np.float64)
        self.sum += v
        self.outer += np.outer(v, v)

    def remove(self, vector: np.ndarray) -> None:
        v = vector.astype(np.float64)
        self.sum -= v
        self.outer -= np.outer(v, v)

    def near(self, vector: np.ndarray) -> np.ndarray:
        """The slots in the PROBES lists nearest `vector` (removed ones among them)."""
        scores = self.centroids @ vector
        k = min(PROBES, len(scores))
        best = np.argpartition(-scores, k - 1)[:k]
        return np.concatenate([np.frombuffer(self.members[i], np.int32) for i in best]).astype(np.int64)

    def cosine_spread(self, vector: np.ndarray, n: int) -> tuple[float, float]:
        """The mean and spread of `vector`'s cosine to the `n` stored turns' user vectors."""
        v = vector.astype(np.float64)
        mean = float(v @ self.sum) / n
        return mean, math.sqrt(max(float(v @ self.outer @ v) / n - mean * mean, 0.0))
