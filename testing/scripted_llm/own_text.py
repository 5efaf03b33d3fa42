"""The scripted LLM's own English text pieces, which the product's extraction has its own of.

The double stands in for an outside model: its reading of a text must not be the product's
by construction (a test where both sides share a stemmer or a stop-word list would pass with
a bug in it), and its answers are fixed byte for byte. So only what is the same to the letter
and carries no judgement about language is shared (the feature hashing and trigrams of
common/text.py); these stay the double's own:

* `_STOPWORDS`, `_WORD_RE`, `_words`: a stop-word list and tokenizer (the product's:
  common/text.py KEYWORD_STOP_WORDS / keyword_tokens, and engine/extract/lexicons.py);
* `_stem`, `_content_stems`: a suffix stemmer (the product folds plurals and suffixes in
  common/text.py `stem`, engine/extract/ and engine/insights.py);
* `split_sentences` (with `_ABBREV_BEFORE_DOT`): a sentence splitter (common/text.py
  `split_sentences`);
* `embed_text`: the hashed bag-of-words + character-trigram embedder; its hashing and
  trigrams are common/text.py's (as engine/embedders.py `HashEmbedder`'s are);
* `_norm_text`, `_norm_key`: apostrophe / case / punctuation folding.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from memoryplus.common.text import char_trigrams, feature_hash

DEFAULT_EMBEDDING_DIM = 384

_WORD_RE = re.compile(r"[^\W_][\w'&-]*")
_APOS_RE = re.compile('[\u2019\u2018\u02bc]')

_STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each else even ever
    every few for from further get gets got had has have having he her here hers herself him
    himself his how i if in into is it its itself just let lets like may me might more most must
    my myself no nor not now of off on once only or other others our ours ourselves out over own
    same shall she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up upon us very was we were what when where
    which while who whom whose why will with would yet you your yours yourself yourselves
    one ones thing things something anything e g eg ie etc via per
    entity entities type types specific named name names must uniquely identifiable listed fit
    concrete meaningful doubt extract extracted good bad represents representing represent
    describes description information info kind kinds any example examples use used using
    """.split()
)

_ABBREV_BEFORE_DOT = re.compile(r'(?:\b(?:Dr|Mr|Mrs|Ms|Prof|St|Mt|Jr|Sr|vs|etc|approx|No)|\b[A-Z]|\be\.g|\bi\.e)$')


def _norm_text(s: str) -> str:
    return _APOS_RE.sub("'", s)


def _norm_key(s: str) -> str:
    """Case/space/punctuation-insensitive key for comparing names and facts."""
    s = _norm_text(s).lower()
    s = re.sub(r'[^\w\s]', ' ', s)
    return ' '.join(s.split())


def _words(s: str) -> list[str]:
    return _WORD_RE.findall(_norm_text(s))


def _stem(word: str) -> str:
    w = word.lower().strip("'")
    if w.endswith("'s"):
        w = w[:-2]
    if len(w) > 4 and w.endswith('ies'):
        w = w[:-3] + 'y'
    elif len(w) > 5 and w.endswith('ing'):
        w = w[:-3]
    elif len(w) > 4 and w.endswith('ed'):
        w = w[:-2]
    elif len(w) > 3 and w.endswith('s') and not w.endswith('ss'):
        w = w[:-1]
    if len(w) > 3 and w.endswith('e'):
        w = w[:-1]
    return w


def _content_stems(words: Iterable[str]) -> set[str]:
    return {_stem(w) for w in words if len(w) > 1 and w.lower() not in _STOPWORDS}



def split_sentences(text: str) -> list[str]:
    """Split text into sentences without breaking on 'Dr.', 'e.g.' and initials."""
    out: list[str] = []
    start = 0
    text = text.strip()
    for m in re.finditer(r'[.!?]+(?=\s|$)|\n+', text):
        if m.group().startswith('.') and _ABBREV_BEFORE_DOT.search(text[: m.start()]):
            continue
        seg = text[start : m.end()].strip()
        if seg:
            out.append(seg)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def _bucket(feature: str, dim: int) -> int:
    return feature_hash(feature) % dim


def embed_text(text: str, dim: int = DEFAULT_EMBEDDING_DIM) -> list[float]:
    """Hashed bag-of-words (weight 1) plus character trigrams (weight 0.5), L2-normalised."""
    dim = max(1, int(dim))
    vec = [0.0] * dim
    words = [w.lower() for w in re.findall(r'\w+', _norm_text(text or ''))]
    for w in words:
        vec[_bucket('w:' + w, dim)] += 1.0
        for gram in char_trigrams(w):
            vec[_bucket('t:' + gram, dim)] += 0.5
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0:
        vec[0] = 1.0
        return vec
    return [v / norm for v in vec]


# --------------------------------------------------------------------------------------
# The brain
# --------------------------------------------------------------------------------------
