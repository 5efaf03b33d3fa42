"""A readable layout for the memory graph: force-directed (Fruchterman–Reingold), then node
boxes pushed apart until none overlap. Pure Python + numpy, no Qt: it can run anywhere.

Nodes already placed keep their place as the starting point (expanding a node does not
reshuffle the picture); new nodes start next to the neighbour that brought them in.
"""
from __future__ import annotations

import math
from typing import Hashable

import numpy as np

Node = Hashable
GRAVITY = 0.01


def layout(nodes: list[Node], edges: list[tuple[Node, Node]], sizes: dict[Node, tuple[float, float]],
           *, start: dict[Node, tuple[float, float]] | None = None, spacing: float = 190.0,
           iterations: int = 250, seed: int = 7, margin: float = 18.0,
           aspect: float | None = None) -> dict[Node, tuple[float, float]]:
    """Centre positions for `nodes`; `sizes` are the node boxes (width, height). `aspect`
    (width / height of the view) stretches the picture to the view's shape, so that it fills
    the view instead of overflowing it in one direction."""
    n = len(nodes)
    if n == 0:
        return {}
    index = {node: i for i, node in enumerate(nodes)}
    rng = np.random.default_rng(seed)
    start = dict(start or {})
    pos = np.zeros((n, 2))
    placed = np.zeros(n, dtype=bool)
    for node, i in index.items():
        if node in start:
            pos[i] = start[node]
            placed[i] = True
    neigh: dict[int, list[int]] = {i: [] for i in range(n)}
    pairs = []
    for a, b in edges:
        if a in index and b in index and a != b:
            ia, ib = index[a], index[b]
            pairs.append((ia, ib))
            neigh[ia].append(ib)
            neigh[ib].append(ia)
    # unplaced nodes: next to a placed neighbour, else on a circle
    radius = spacing * max(1.0, math.sqrt(n) / 1.5)
    for i in range(n):
        if placed[i]:
            continue
        anchor = next((j for j in neigh[i] if placed[j]), None)
        if anchor is not None:
            angle = rng.uniform(0, 2 * math.pi)
            pos[i] = pos[anchor] + spacing * np.array([math.cos(angle), math.sin(angle)])
        else:
            angle = 2 * math.pi * i / n
            pos[i] = radius * np.array([math.cos(angle), math.sin(angle)]) + rng.normal(0, 5, 2)
        placed[i] = True
    if n > 1:
        pos = _force(pos, pairs, spacing, iterations, rng)
    box = np.array([sizes.get(node, (100.0, 30.0)) for node in nodes], dtype=float)
    if aspect and n > 2:
        w = np.ptp(pos[:, 0]) + box[:, 0].mean()
        h = np.ptp(pos[:, 1]) + box[:, 1].mean()
        if w > 0 and h > 0:
            fx = math.sqrt(aspect * h / w)
            pos[:, 0] *= fx
            pos[:, 1] /= fx
    pos = _separate(pos, box, margin)
    pos -= pos.mean(axis=0)
    return {node: (float(pos[i, 0]), float(pos[i, 1])) for node, i in index.items()}


def _force(pos: np.ndarray, pairs: list[tuple[int, int]], k: float, iterations: int,
           rng: np.random.Generator) -> np.ndarray:
    n = len(pos)
    pos = pos.copy()
    temp = k * 1.5
    cool = temp / (iterations + 1)
    a = np.array([p[0] for p in pairs], dtype=int)
    b = np.array([p[1] for p in pairs], dtype=int)
    for _ in range(iterations):
        delta = pos[:, None, :] - pos[None, :, :]
        dist = np.linalg.norm(delta, axis=2)
        np.fill_diagonal(dist, 1.0)
        dist = np.maximum(dist, 1.0)
        rep = (k * k / dist ** 2)[:, :, None] * delta          # k²/d along the unit vector
        disp = rep.sum(axis=1)
        if len(pairs):
            d = pos[a] - pos[b]
            dl = np.maximum(np.linalg.norm(d, axis=1), 1.0)
            att = (dl / k)[:, None] * d                          # d²/k along the unit vector
            np.add.at(disp, a, -att)
            np.add.at(disp, b, att)
        disp -= pos * GRAVITY          # a weak pull to the centre keeps islands close
        length = np.maximum(np.linalg.norm(disp, axis=1), 1e-9)
        pos += disp / length[:, None] * np.minimum(length, temp)[:, None]
        temp = max(temp - cool, 1.0)
    if not np.all(np.isfinite(pos)):
        pos = rng.normal(0, k, (n, 2))
    return pos


def _separate(pos: np.ndarray, box: np.ndarray, margin: float, rounds: int = 200) -> np.ndarray:
    """Push overlapping boxes apart along the axis of least overlap."""
    pos = pos.copy()
    n = len(pos)
    half = box / 2 + margin / 2
    for _ in range(rounds):
        moved = False
        for i in range(n):
            for j in range(i + 1, n):
                dx = pos[j, 0] - pos[i, 0]
                dy = pos[j, 1] - pos[i, 1]
                ox = half[i, 0] + half[j, 0] - abs(dx)
                oy = half[i, 1] + half[j, 1] - abs(dy)
                if ox > 0 and oy > 0:
                    moved = True
                    if ox < oy:
                        s = ox / 2 + 0.5
                        sign = 1.0 if dx >= 0 else -1.0
                        pos[i, 0] -= sign * s
                        pos[j, 0] += sign * s
                    else:
                        s = oy / 2 + 0.5
                        sign = 1.0 if dy >= 0 else -1.0
                        pos[i, 1] -= sign * s
                        pos[j, 1] += sign * s
        if not moved:
            break
    return pos


def overlaps(positions: dict[Node, tuple[float, float]], sizes: dict[Node, tuple[float, float]]) -> list[tuple[Node, Node]]:
    """Pairs of node boxes that overlap (for tests and checks)."""
    items = list(positions.items())
    out = []
    for i, (a, pa) in enumerate(items):
        wa, ha = sizes[a]
        for b, pb in items[i + 1:]:
            wb, hb = sizes[b]
            if abs(pa[0] - pb[0]) < (wa + wb) / 2 and abs(pa[1] - pb[1]) < (ha + hb) / 2:
                out.append((a, b))
    return out
