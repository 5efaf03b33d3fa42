"""The keyword tokens of every BM25 here: lower-cased runs of `[a-z0-9]` minus the stop words
below, as LongMemEval's README defines them for the baseline (cli/bench_recall.py). The
engine's turn index (engine/turn_index.py) uses the very same, so ours and the baseline rank
the same words. Standard library only: the bench imports it before any engine code.
"""
from __future__ import annotations

import re

STOP_WORDS = frozenset(
    "a an the and or of to in on at for is are was were be been it this that with as by i you he "
    "she we they my your his her our their me him them do did does have has had not no so but if "
    "from what when where who how which".split())
_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    return [w for w in _TOKEN.findall(text.lower()) if w not in STOP_WORDS]
