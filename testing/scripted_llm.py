"""A scripted LLM served as an OpenAI-compatible HTTP server on the loopback address.

Tests, the demo, the benchmark and chaos runs point the real ``openai`` client (and
graphiti's real ``OpenAIClient`` / ``OpenAIGenericClient`` / ``OpenAIEmbedder``) at
``ScriptedLLMServer().base_url``, so the whole client path runs: base URL, API key,
structured output (``responses.parse`` and ``response_format``), streaming, retries,
timeouts.  Nothing leaves 127.0.0.1.

Endpoints (also accepted without the ``/v1`` prefix):

* ``POST /v1/chat/completions``  non-streamed and ``stream: true`` (SSE); ``response_format``
  json_schema / json_object / none; ``logprobs`` requests (graphiti's OpenAIRerankerClient)
  get a True/False token with top_logprobs.
* ``POST /v1/responses``  non-streamed (the shape ``client.responses.parse`` accepts) and
  ``stream: true`` (the full Responses SSE event sequence, ``instructions`` honoured).
* ``POST /v1/embeddings``  deterministic hashed bag-of-words + character trigrams,
  L2-normalised; float or base64 encoding; list input.
* ``GET /v1/models``.

Structured requests are answered by :class:`ScriptedBrain`, which dispatches on the
response-model / json-schema name graphiti sends and reads graphiti's own prompt tags.
Unknown schemas get a minimal valid instance built from the JSON schema.

Standalone::

    python -m memoryplus.testing.scripted_llm --port 8765 --latency-ms 50
"""

from __future__ import annotations

import argparse
import ast
import base64
import hashlib
import json
import logging
import math
import re
import socket
import struct
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from memoryplus.common.isodates import parse_iso

__all__ = [
    'DEFAULT_EMBEDDING_DIM',
    'FAULT_KINDS',
    'ScriptedBrain',
    'ScriptedLLMServer',
    'embed_text',
    'last_user_text',
    'mask_secret',
    'minimal_instance',
    'request_text',
    'main',
]

log = logging.getLogger(__name__)

DEFAULT_EMBEDDING_DIM = 384
DEFAULT_MODEL_ID = 'scripted-llm'
FAULT_KINDS = ('429', '500', '401', 'timeout', 'garbage', 'think')
MAX_SUMMARY_CHARS = 900  # graphiti caps summaries at 1000; stay under it

# --------------------------------------------------------------------------------------
# Text helpers
# --------------------------------------------------------------------------------------

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

_PRONOUNS = frozenset(
    'i me my mine myself we us our ours ourselves you your yours he him his she her hers it its '
    'they them their theirs this that these those'.split()
)
_FIRST_PERSON = frozenset('i me my mine myself we us our ours ourselves'.split())
_FP_POSSESSIVE = frozenset({'my', 'our'})

_SKIP_INITIAL = frozenset(
    """
    i the a an my our your his her their its this that these those it we you he she they there
    here what which who whom whose where when why how yes no yeah yep nope hi hello hey thanks
    thank please also and but or so then if now today tonight tomorrow yesterday ok okay well oh
    sure let lets do does did is are was were can could would should will shall may might must
    have has had remember actually anyway after before while since because although though just
    maybe perhaps some any every each all both not never always sometimes often usually in on at
    from to for with by of about as into over under last next first good great nice sorry wow
    cool fine right also again still only even currently recently lately finally btw
    """.split()
)
_TEMPORAL_WORDS = frozenset(
    'monday tuesday wednesday thursday friday saturday sunday january february march april june '
    'july august september october november december'.split()
)
_ALWAYS_SKIP = frozenset({'i', "i'm", "i've", "i'd", "i'll"})
_CONNECTORS = frozenset({'of', 'de', 'da', 'del', 'della', 'van', 'von', 'der', 'den', 'la', 'le', 'du', '&'})
_TITLES = frozenset({'dr', 'mr', 'mrs', 'ms', 'prof', 'st', 'mt', 'sir', 'jr', 'sr'})
_ABBREV_BEFORE_DOT = re.compile(r'(?:\b(?:Dr|Mr|Mrs|Ms|Prof|St|Mt|Jr|Sr|vs|etc|approx|No)|\b[A-Z]|\be\.g|\bi\.e)$')

_FILLER = frozenset(
    """
    i me we us you he she it they him her them the a an this that these those my our your his
    their its really also still just now currently actually recently already usually often always
    sometimes then too very so even again lately finally totally definitely probably maybe
    here there today tonight tomorrow yesterday anymore
    """.split()
)
_COPULA = frozenset({'is', 'are', 'was', 'were', 'be', 'been', 'being', "'s"})
_MODALS = frozenset({'can', 'cannot', 'could', 'will', 'would', 'shall', 'should', 'may', 'might', 'must'})
_IRREGULAR_PAST = frozenset(
    """
    went was were had did got met bought made took saw came gave found left told said knew thought
    felt ran wrote began became brought sold spent taught won lost flew drove ate drank sent
    built paid kept slept stood sat understood held heard meant broke chose forgot grew rode
    """.split()
)
_CONJ_SPECIAL = {'am': 'is', 'are': 'is', 'have': 'has', 'do': 'does', 'go': 'goes', 'be': 'is', "'m": 'is',
                 "don't": "doesn't", "haven't": "hasn't", "aren't": "isn't", "am not": 'is not'}
_CLAUSE_BREAK_RE = re.compile(r'[,;:()\u2014]|\s-\s|\b(?:and|but|or|so|because|while|although|though|then|which)\b', re.I)
_TERMINATION_RE = re.compile(r'\b(?:used to|no longer|not any ?more|anymore|formerly|previously|former|ex-)\b', re.I)

# Relation heads that naturally hold several targets at once: a new target does not
# contradict an old one ("likes jazz" and "likes Mozart" are both true).
_MULTI_VALUED_HEADS = frozenset(
    {'RELATES_TO', 'LIKES', 'LOVES', 'ENJOYS', 'KNOWS', 'VISITED', 'VISITS', 'MET', 'MEETS',
     'PLAYS', 'SPEAKS', 'READS', 'WATCHES', 'USES', 'OWNS', 'HAS', 'MENTIONS', 'TOLD', 'TELLS',
     'CALLED', 'CALLS', 'ASKED', 'ASKS', 'WENT_TO', 'TALKED_TO'}
)

_PLACE_CUES = frozenset({'in', 'from', 'to', 'near', 'into', 'visit', 'visited', 'visiting', 'around', 'across'})
_ORG_SUFFIXES = frozenset({'inc', 'corp', 'corporation', 'ltd', 'gmbh', 'llc', 'ag', 'co', 'university',
                           'bank', 'company', 'group', 'labs', 'institute', 'college', 'school', 'hospital'})


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


def _split_camel(name: str) -> list[str]:
    parts = re.sub(r'([a-z0-9])([A-Z])', r'\1 \2', name or '')
    return [p for p in re.split(r'[\s_\-]+', parts) if p]


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


def _expand_contractions(s: str) -> str:
    s = _norm_text(s)
    s = re.sub(r"\bI'm\b", 'I am', s)
    s = re.sub(r"\bI've\b", 'I have', s)
    s = re.sub(r"\bI'd\b", 'I would', s)
    s = re.sub(r"\bI'll\b", 'I will', s)
    s = re.sub(r"\b([Ww]e)'re\b", r'\1 are', s)
    s = re.sub(r"\b([Ww]e)'ve\b", r'\1 have', s)
    s = re.sub(r"\b([Ww]e)'ll\b", r'\1 will', s)
    s = re.sub(r"\b([Cc])an't\b", r'\1annot', s)
    s = re.sub(r"\b([Ww])on't\b", r'\1ill not', s)
    s = re.sub(r"\b(\w+)n't\b", r'\1 not', s)
    return s


def _looks_past_or_modal(w: str) -> bool:
    w = w.lower()
    return w in _MODALS or w in _IRREGULAR_PAST or w.endswith('ed') or w in {'not', 'to'}


def _third_person(verb: str) -> str:
    v = verb.lower()
    if v in _CONJ_SPECIAL:
        return _CONJ_SPECIAL[v]
    if _looks_past_or_modal(v) or v in _COPULA or not v.isalpha() or "'" in v:
        return v
    if v.endswith(('s', 'sh', 'ch', 'x', 'z', 'o')):
        return v + 'es'
    if len(v) > 1 and v.endswith('y') and v[-2] not in 'aeiou':
        return v[:-1] + 'ies'
    return v + 's'


_ADVERBS = 'really|also|still|just|now|currently|usually|often|never|always|actually|recently|mostly|sometimes'


def rewrite_first_person(sentence: str, speaker: str | None) -> str:
    """'I live in Berlin' spoken by User -> 'User lives in Berlin'."""
    if not speaker:
        return sentence.strip()
    s = _norm_text(sentence)
    s = re.sub(r"\bI'm\b", f'{speaker} is', s)
    s = re.sub(r"\bI've\b", f'{speaker} has', s)
    s = re.sub(r"\bI'd\b", f'{speaker} would', s)
    s = re.sub(r"\bI'll\b", f'{speaker} will', s)
    s = re.sub(r'\bI am\b', f'{speaker} is', s)

    def _conj(m: re.Match) -> str:
        adv, verb = m.group(1) or '', m.group(2)
        return f'{speaker} {adv}{_third_person(verb)}'

    had_i = bool(re.search(r'\bI\s+[A-Za-z]', s))
    s = re.sub(r"\bI\s+((?:" + _ADVERBS + r")\s+)?([A-Za-z]+(?:'[a-z]+)?)(?![\w'])", _conj, s)
    if had_i:
        # "I live in Berlin and work at Acme" -> "... and works at Acme" (elided subject)
        def _conj_elided(m: re.Match) -> str:
            word = m.group(2)
            if word in _STOPWORDS or word in _FILLER or word.endswith(('ly', 's')):
                return m.group(0)
            return f'{m.group(1)} {_third_person(word)}'

        s = re.sub(r'\b(and|but|or|then)\s+([a-z]+)(?=\s+(?:at|in|on|for|with|to|the|a|an|from|as|into|about|'
                   r'near|by|my|our)\b)', _conj_elided, s)
    s = re.sub(r'\bI\b', speaker, s)
    s = re.sub(r'\b[Mm]y\b', f"{speaker}'s", s)
    s = re.sub(r'\b[Mm]ine\b', f"{speaker}'s", s)
    s = re.sub(r'\b[Mm]yself\b', speaker, s)
    s = re.sub(r'\bme\b', speaker, s)
    return s.strip()


def _to_snake(words: list[str]) -> str:
    rel = '_'.join(words).upper()
    rel = re.sub(r'[^A-Z0-9]+', '_', rel).strip('_')
    return rel or 'RELATES_TO'


def _section(prompt: str, tag: str) -> str | None:
    """Content between <TAG> and the next </TAG> (first occurrence)."""
    open_tag, close_tag = f'<{tag}>', f'</{tag}>'
    i = prompt.find(open_tag)
    if i < 0:
        return None
    j = prompt.find(close_tag, i + len(open_tag))
    if j < 0:
        return prompt[i + len(open_tag) :].strip()
    return prompt[i + len(open_tag) : j].strip()


def _parse_literal(text: str | None) -> Any:
    """Parse a JSON or Python-repr literal (graphiti uses both in its prompts)."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _json_values(text: str | None) -> list[Any]:
    """All JSON values written one after another in a section (e.g. <MESSAGES>)."""
    out: list[Any] = []
    if not text:
        return out
    dec = json.JSONDecoder()
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            val, j = dec.raw_decode(text, i)
        except ValueError:
            out.append(text[i:])
            break
        out.append(val)
        i = j
    return out


def _texts_from_values(values: Iterable[Any]) -> list[str]:
    texts: list[str] = []
    for v in values:
        if isinstance(v, str):
            texts.append(v)
        elif isinstance(v, dict):
            for key in ('content', 'episode_body', 'text', 'fact'):
                if isinstance(v.get(key), str):
                    texts.append(v[key])
                    break
        elif isinstance(v, list):
            texts.extend(_texts_from_values(v))
    return texts


def _iso_z(dt: datetime) -> str:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).isoformat().replace('+00:00', 'Z')


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    m = re.search(r'\d{4}-\d{2}-\d{2}(?:[T ][0-9:.]+)?(?:Z|[+-]\d{2}:?\d{2})?', text)
    if not m:
        return None
    try:
        return parse_iso(m.group())
    except ValueError:
        return None


# --------------------------------------------------------------------------------------
# Conversation parsing and the extraction heuristics
# --------------------------------------------------------------------------------------

_SPEAKER_RE = re.compile(r"^\s*([A-Za-z][\w .'-]{0,40}?)\s*:\s+(\S.*)$")
_EPISODE_HDR_RE = re.compile(r'^\s*\[(?:Episode\s+(\d+)|(CONTEXT EPISODE))\]')


@dataclass
class Utterance:
    speaker: str | None
    text: str
    episode: int = 0
    context_only: bool = False


@dataclass
class Mention:
    name: str
    is_speaker: bool = False
    context: set[str] = field(default_factory=set)
    episodes: set[int] = field(default_factory=set)


def parse_conversation(text: str, *, speakers: bool = True) -> list[Utterance]:
    """Split episode content into utterances ("Speaker: text" lines, [Episode N] headers)."""
    out: list[Utterance] = []
    episode, context_only = 0, False
    for raw in _norm_text(text or '').splitlines():
        line = raw.strip()
        if not line:
            continue
        hdr = _EPISODE_HDR_RE.match(line)
        if hdr:
            if hdr.group(1) is not None:
                episode, context_only = int(hdr.group(1)), False
            else:
                context_only = True
            continue
        m = _SPEAKER_RE.match(line) if speakers else None
        if m and len(m.group(1).split()) <= 4:
            out.append(Utterance(m.group(1).strip(), m.group(2).strip(), episode, context_only))
        elif out and out[-1].episode == episode and out[-1].context_only == context_only:
            prev = out[-1]
            out[-1] = Utterance(prev.speaker, f'{prev.text} {line}', episode, context_only)
        else:
            out.append(Utterance(None, line, episode, context_only))
    return out


def capitalised_phrases(sentence: str) -> list[tuple[str, int, int]]:
    """Capitalised words/phrases in a sentence, with char spans; skips sentence-initial
    function words ('I', 'The', 'My', ...), pronoun 'I', weekdays and months."""
    s = _norm_text(sentence)
    toks = [(m.group(), m.start(), m.end()) for m in _WORD_RE.finditer(s)]
    out: list[tuple[str, int, int]] = []
    i = 0
    while i < len(toks):
        w, st, en = toks[i]
        lw = w.lower().split("'")[0]
        is_cap = w[0].isupper()
        skip = (
            not is_cap
            or lw in _ALWAYS_SKIP
            or lw in _TEMPORAL_WORDS
            or lw.rstrip('s') in _TEMPORAL_WORDS
            or (i == 0 and (lw in _SKIP_INITIAL or lw.endswith(('ed', 'ing', 'ly'))))
        )
        if skip:
            i += 1
            continue
        j = i
        end = en
        while j + 1 < len(toks):
            nw, nst, nen = toks[j + 1]
            gap = s[end:nst]
            cur = toks[j][0]
            gap_ok = gap.strip() == '' or (gap.strip() == '.' and cur.lower() in _TITLES)
            if (gap_ok and nw[0].isupper() and nw.lower() not in _ALWAYS_SKIP
                    and nw.lower().rstrip('s') not in _TEMPORAL_WORDS):
                j += 1
                end = nen
                continue
            if gap_ok and nw.lower() in _CONNECTORS and j + 2 < len(toks):
                aw, ast_, aen = toks[j + 2]
                if s[nen:ast_].strip() == '' and aw[0].isupper():
                    j += 2
                    end = aen
                    continue
            break
        name = s[st:end]
        if name.endswith("'s"):
            name = name[:-2]
        name = name.strip(" '-")
        if name and len(name.split()) <= 6 and not name.isdigit():
            out.append((name, st, st + len(name)))
        i = j + 1
    return out


def _find_mentions(sentence: str, names: Iterable[str]) -> list[tuple[str, int, int]]:
    """Non-overlapping, longest-first mentions of the given names (case-insensitive)."""
    spans: list[tuple[int, int, str]] = []
    for name in names:
        if not name.strip():
            continue
        pat = re.compile(r'(?<![\w])' + re.escape(_norm_text(name)) + r"(?![\w])", re.I)
        for m in pat.finditer(sentence):
            spans.append((m.start(), m.end(), name))
    spans.sort(key=lambda t: (t[0], -(t[1] - t[0])))
    kept: list[tuple[str, int, int]] = []
    last_end = -1
    for st, en, name in spans:
        if st >= last_end:
            kept.append((name, st, en))
            last_end = en
    return kept


def _window(sentence: str, start: int, end: int, spans: Iterable[tuple[str, int, int]], size: int = 3) -> list[str]:
    """Up to `size` words either side of a mention, inside its clause, other mentions masked."""
    chars = list(sentence)
    for _n, st, en in spans:
        if (st, en) != (start, end):
            chars[st:en] = ' ' * (en - st)
    masked = ''.join(chars)
    left, right = masked[:start], masked[end:]
    breaks = list(_CLAUSE_BREAK_RE.finditer(left))
    if breaks:
        left = left[breaks[-1].end():]
    rb = _CLAUSE_BREAK_RE.search(right)
    if rb:
        right = right[: rb.start()]
    return _words(left)[-size:] + _words(right)[:size]


def extract_entity_mentions(utterances: list[Utterance]) -> list[Mention]:
    """Speakers first, then capitalised phrases of the (non-context) utterances."""
    found: dict[str, Mention] = {}
    order: list[str] = []

    def add(name: str, is_speaker: bool, ctx: Iterable[str], episode: int) -> None:
        key = _norm_key(name)
        if not key:
            return
        if key not in found:
            found[key] = Mention(name=name, is_speaker=is_speaker)
            order.append(key)
        m = found[key]
        m.is_speaker = m.is_speaker or is_speaker
        m.context.update(ctx)
        m.episodes.add(episode)

    live = [u for u in utterances if not u.context_only]
    for u in live:
        if u.speaker:
            add(u.speaker, True, ['speaker', 'person', 'people', 'human', 'individual', 'participant'], u.episode)
    for u in live:
        for sent in split_sentences(u.text):
            phrases = capitalised_phrases(sent)
            for name, st, en in phrases:
                ctx = _words(name) + _window(sent, st, en, phrases)
                prev = _words(sent[:st])[-1:]
                first = name.split()[0].lower().rstrip('.')
                last = name.split()[-1].lower().rstrip('.')
                if last in _ORG_SUFFIXES:
                    ctx += ['organization', 'company', 'organisation']
                elif first in _TITLES:
                    ctx += ['person', 'people', 'human']
                elif prev and prev[0].lower() in _PLACE_CUES:
                    ctx += ['place', 'location', 'city', 'country']
                add(name, False, ctx, u.episode)
    return [found[k] for k in order]


def parse_entity_types(section: str | None) -> list[dict]:
    """The <ENTITY TYPES> list (graphiti writes it as a Python repr of a list of dicts)."""
    val = _parse_literal(section)
    types: list[dict] = []
    if isinstance(val, list):
        for t in val:
            if isinstance(t, dict) and 'entity_type_id' in t:
                types.append(t)
    elif section:
        for m in re.finditer(r"""['"]entity_type_id['"]\s*:\s*(\d+)\s*,\s*['"]entity_type_name['"]\s*:\s*['"]([^'"]+)['"]""", section):
            types.append({'entity_type_id': int(m.group(1)), 'entity_type_name': m.group(2), 'entity_type_description': ''})
    return types


def choose_entity_type(types: list[dict], context_words: Iterable[str]) -> int:
    """entity_type_id by word overlap between context and each type's name + description;
    the default 'Entity' type when nothing overlaps."""
    if not types:
        return 0
    default_id = next((int(t['entity_type_id']) for t in types if t.get('entity_type_name') == 'Entity'), None)
    ctx = _content_stems(context_words)
    best_id, best_score = None, 0
    for t in types:
        name = str(t.get('entity_type_name') or '')
        if name == 'Entity':
            continue
        name_stems = _content_stems(w.lower() for w in _split_camel(name))
        desc_stems = _content_stems(_words(str(t.get('entity_type_description') or '')))
        score = 3 * len(ctx & name_stems) + len(ctx & desc_stems)
        if score > best_score:
            best_id, best_score = int(t['entity_type_id']), score
    if best_id is not None:
        return best_id
    if default_id is not None:
        return default_id
    return int(types[0]['entity_type_id'])


def parse_fact_types(prompt: str) -> tuple[list[dict], bool]:
    sec = _section(prompt, 'FACT_TYPES')
    if sec is None:
        sec = _section(prompt, 'FACT TYPES')
    val = _parse_literal(sec)
    types = [t for t in val if isinstance(t, dict) and t.get('fact_type_name')] if isinstance(val, list) else []
    strict = 'Do not derive a new relation_type' in prompt
    return types, strict


def _signature_ok(fact_type: dict, src_labels: list[str], tgt_labels: list[str]) -> bool:
    sigs = fact_type.get('fact_type_signatures') or [('Entity', 'Entity')]
    src = set(src_labels) | {'Entity'}
    tgt = set(tgt_labels) | {'Entity'}
    for sig in sigs:
        if isinstance(sig, (list, tuple)) and len(sig) == 2 and sig[0] in src and sig[1] in tgt:
            return True
    return False


def match_fact_type(relation: str, clause_words: list[str], fact_types: list[dict],
                    src_labels: list[str], tgt_labels: list[str]) -> str | None:
    if not fact_types:
        return None
    rel_stems = _content_stems(relation.lower().split('_'))
    ctx_stems = rel_stems | _content_stems(clause_words)
    best, best_score = None, 0
    for ft in fact_types:
        name = str(ft['fact_type_name'])
        if not _signature_ok(ft, src_labels, tgt_labels):
            continue
        if re.sub(r'[^A-Z0-9]', '', name.upper()) == re.sub(r'[^A-Z0-9]', '', relation.upper()):
            return name
        name_stems = _content_stems(w.lower() for w in _split_camel(name))
        desc_stems = _content_stems(_words(str(ft.get('fact_type_description') or '')))
        name_hits = len(rel_stems & name_stems)
        desc_hits = len(ctx_stems & desc_stems)
        if name_hits == 0 and desc_hits < 2:
            continue
        score = 3 * name_hits + desc_hits
        if score > best_score:
            best, best_score = name, score
    return best


def _relation_words(between: str, anchor_kind: str, other_names: list[str]) -> list[str]:
    """Words of the verb phrase between an anchor (subject / pronoun) and a target."""
    # the part after the last clause break
    parts = _CLAUSE_BREAK_RE.split(between)
    seg = parts[-1] if parts else between
    for name, st, en in sorted(_find_mentions(seg, other_names), key=lambda t: -t[1]):
        seg = seg[:st] + ' ' + seg[en:]
    words = [w.lower() for w in _words(seg)]
    if anchor_kind == 'possessive':
        cop = next((k for k, w in enumerate(words) if w in _COPULA), None)
        if cop is not None and cop > 0:
            head = [w for w in words[:cop] if w not in _FILLER]
            tail = [w for w in words[cop + 1 :] if w not in _FILLER]
            if head:
                return ['has'] + head + tail
        nouns = [w for w in words if w not in _FILLER]
        if len(nouns) == 1:  # "my wife Ana" -> HAS_WIFE
            return ['has'] + nouns
    words = [w for w in words if w not in _FILLER]
    if anchor_kind == 'first_person_singular' and words:
        words[0] = _third_person(words[0])
    return words[-5:]


@dataclass
class Triple:
    source: str
    relation: str
    target: str
    fact: str
    episode: int = 0


def extract_triples(utterances: list[Utterance], entity_names: list[str],
                    entity_labels: dict[str, list[str]] | None = None,
                    fact_types: list[dict] | None = None, strict: bool = False) -> list[Triple]:
    """For each sentence: subject (the speaker for first-person sentences, else the first
    entity mentioned) -> each other entity; relation from the verb phrase between them."""
    entity_labels = entity_labels or {}
    by_key = {_norm_key(n): n for n in entity_names}
    out: list[Triple] = []
    seen: set[tuple[str, str, str, str]] = set()
    for u in utterances:
        if u.context_only:
            continue
        speaker = by_key.get(_norm_key(u.speaker)) if u.speaker else None
        for raw_sent in split_sentences(u.text):
            sent = _expand_contractions(raw_sent)
            mentions = _find_mentions(sent, entity_names)
            fp_tokens = [
                (m.group().lower(), m.start(), m.end())
                for m in re.finditer(r"(?<![\w'])(?:I|[Mm]e|[Mm]y|[Ww]e|[Uu]s|[Oo]ur)(?![\w'])", sent)
            ]
            if speaker and fp_tokens:
                subject = speaker
                anchors = [(('possessive' if w in _FP_POSSESSIVE else 'first_person_singular' if w == 'i' else 'other'), st, en)
                           for w, st, en in fp_tokens if w not in {'me', 'us'}]
                anchors += [('other', st, en) for n, st, en in mentions if _norm_key(n) == _norm_key(speaker)]
            elif mentions:
                subject = mentions[0][0]
                anchors = [('other', st, en) for n, st, en in mentions if _norm_key(n) == _norm_key(subject)]
            else:
                continue
            fact = rewrite_first_person(raw_sent, speaker if fp_tokens else None)
            targets_done: set[str] = set()
            for name, st, en in mentions:
                if _norm_key(name) == _norm_key(subject) or _norm_key(name) in targets_done:
                    continue
                targets_done.add(_norm_key(name))
                before = [a for a in anchors if a[2] <= st]
                if before:
                    kind, _ast, aen = max(before, key=lambda a: a[2])
                    others = [n for n in entity_names if _norm_key(n) not in {_norm_key(name), _norm_key(subject)}]
                    words = _relation_words(sent[aen:st], kind, others)
                    relation = _to_snake(words) if words else 'RELATES_TO'
                    clause_words = words
                else:
                    relation, clause_words = 'RELATES_TO', _words(sent)
                matched = match_fact_type(relation, clause_words, fact_types or [],
                                          entity_labels.get(subject, []), entity_labels.get(name, []))
                if matched:
                    relation = matched
                elif strict:
                    continue
                key = (_norm_key(subject), relation, _norm_key(name), fact)
                if key in seen:
                    continue
                seen.add(key)
                out.append(Triple(subject, relation, name, fact, u.episode))
    return out


def parse_fact_triples(fact: str) -> list[tuple[str, str, str]]:
    """Fallback when a fact was not produced by this brain: capitalised phrases are the
    entities, the first one is the subject."""
    names: list[str] = []
    for sent in split_sentences(fact):
        for name, _st, _en in capitalised_phrases(sent):
            if _norm_key(name) not in {_norm_key(n) for n in names}:
                names.append(name)
    if len(names) < 2:
        return []
    triples = extract_triples([Utterance(None, fact)], names)
    return [(_norm_key(t.source), t.relation, _norm_key(t.target)) for t in triples]


def _relation_core(relation: str) -> tuple[bool, tuple[str, ...]]:
    """(negated?, stemmed words): DOES_NOT_LIVE_IN / NO_LONGER_LIVES_IN / USED_TO_LIVE_IN ->
    (True, ('liv', 'in')); LIVES_IN -> (False, ('liv', 'in'))."""
    words = [w for w in relation.upper().split('_') if w]
    rest, neg = list(words), False
    if rest[:2] == ['USED', 'TO']:
        neg, rest = True, rest[2:]
    while rest and rest[0] in {'DOES', 'DO', 'DID', 'IS', 'ARE', 'WAS', 'NOT', 'NO', 'LONGER', 'NEVER'}:
        neg = neg or rest[0] in {'NOT', 'NO', 'NEVER'}
        rest = rest[1:]
    core = rest if neg and rest else words
    return neg, tuple(_stem(w) for w in core)


def _is_multi_valued(relation: str) -> bool:
    """LIKES, LIKES_TO_VISIT, VISITED, ... hold several targets at once; HAS_DENTIST does not."""
    if relation in _MULTI_VALUED_HEADS:
        return True
    head = relation.split('_')[0]
    return head != 'HAS' and head in _MULTI_VALUED_HEADS


# --------------------------------------------------------------------------------------
# JSON-schema helpers
# --------------------------------------------------------------------------------------


def _resolve_ref(schema: dict, root: dict) -> dict:
    ref = schema.get('$ref')
    if not isinstance(ref, str) or not ref.startswith('#/'):
        return schema
    node: Any = root
    for part in ref[2:].split('/'):
        if not isinstance(node, dict) or part not in node:
            return {}
        node = node[part]
    return node if isinstance(node, dict) else {}


def minimal_instance(schema: dict | None, root: dict | None = None, _depth: int = 0) -> Any:
    """A minimal value valid against a JSON schema (required fields only: [] / '' / 0 /
    false / null where allowed / nested minimal objects)."""
    if not isinstance(schema, dict) or _depth > 32:
        return None
    root = root if root is not None else schema
    if '$ref' in schema:
        return minimal_instance(_resolve_ref(schema, root), root, _depth + 1)
    if 'const' in schema:
        return schema['const']
    if isinstance(schema.get('enum'), list) and schema['enum']:
        return schema['enum'][0]
    for key in ('anyOf', 'oneOf'):
        opts = schema.get(key)
        if isinstance(opts, list) and opts:
            for o in opts:
                if isinstance(o, dict) and o.get('type') == 'null':
                    return None
            return minimal_instance(opts[0], root, _depth + 1)
    if isinstance(schema.get('allOf'), list) and schema['allOf']:
        merged: dict = {}
        for o in schema['allOf']:
            o = _resolve_ref(o, root) if isinstance(o, dict) else {}
            for k, v in o.items():
                if k == 'properties':
                    merged.setdefault('properties', {}).update(v)
                elif k == 'required':
                    merged.setdefault('required', []).extend(v)
                else:
                    merged.setdefault(k, v)
        return minimal_instance(merged, root, _depth + 1)
    typ = schema.get('type')
    if isinstance(typ, list):
        typ = None if 'null' in typ else (typ[0] if typ else None)
        if typ is None:
            return None
    if typ == 'object' or (typ is None and 'properties' in schema):
        props = schema.get('properties') or {}
        out = {}
        for k in schema.get('required') or []:
            out[k] = minimal_instance(props.get(k, {}), root, _depth + 1)
        return out
    if typ == 'array':
        n = int(schema.get('minItems') or 0)
        items = schema.get('items') if isinstance(schema.get('items'), dict) else {}
        return [minimal_instance(items, root, _depth + 1) for _ in range(n)]
    if typ == 'string':
        fmt = schema.get('format')
        fixed = {
            'date-time': '1970-01-01T00:00:00Z',
            'date': '1970-01-01',
            'time': '00:00:00',
            'uuid': '00000000-0000-0000-0000-000000000000',
            'email': 'nobody@example.com',
            'uri': 'http://127.0.0.1/',
            'duration': 'P0D',
        }.get(fmt)
        if fixed is not None:
            return fixed
        return 'x' * int(schema.get('minLength') or 0)
    if typ in ('integer', 'number'):
        lo = schema.get('minimum')
        xlo = schema.get('exclusiveMinimum')
        hi = schema.get('maximum')
        xhi = schema.get('exclusiveMaximum')
        val: float = 0
        if isinstance(lo, (int, float)) and val < lo:
            val = lo
        if isinstance(xlo, (int, float)) and val <= xlo:
            val = xlo + 1
        if isinstance(hi, (int, float)) and val > hi:
            val = hi
        if isinstance(xhi, (int, float)) and val >= xhi:
            val = xhi - 1
        return int(math.ceil(val)) if typ == 'integer' else float(val)
    if typ == 'boolean':
        return False
    return None


def fill_required(value: Any, schema: dict | None, root: dict | None = None, _depth: int = 0) -> Any:
    """Add any required field the brain's answer lacks (e.g. strict schemas on /responses
    make every property required)."""
    if not isinstance(schema, dict) or _depth > 32:
        return value
    root = root if root is not None else schema
    if '$ref' in schema:
        return fill_required(value, _resolve_ref(schema, root), root, _depth + 1)
    for key in ('anyOf', 'oneOf'):
        if isinstance(schema.get(key), list) and value is not None:
            for o in schema[key]:
                o2 = _resolve_ref(o, root) if isinstance(o, dict) else {}
                if isinstance(value, dict) and (o2.get('type') == 'object' or 'properties' in o2):
                    return fill_required(value, o2, root, _depth + 1)
                if isinstance(value, list) and o2.get('type') == 'array':
                    return fill_required(value, o2, root, _depth + 1)
            return value
    if isinstance(value, dict) and (schema.get('type') == 'object' or 'properties' in schema):
        props = schema.get('properties') or {}
        for k in schema.get('required') or []:
            if k not in value:
                value[k] = minimal_instance(props.get(k, {}), root, _depth + 1)
        for k, v in list(value.items()):
            if k in props:
                value[k] = fill_required(v, props[k], root, _depth + 1)
        return value
    if isinstance(value, list) and isinstance(schema.get('items'), dict):
        return [fill_required(v, schema['items'], root, _depth + 1) for v in value]
    return value


# --------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------


def _bucket(feature: str, dim: int) -> int:
    h = hashlib.blake2b(feature.encode('utf-8'), digest_size=8).digest()
    return int.from_bytes(h, 'little') % dim


def embed_text(text: str, dim: int = DEFAULT_EMBEDDING_DIM) -> list[float]:
    """Hashed bag-of-words (weight 1) plus character trigrams (weight 0.5), L2-normalised."""
    dim = max(1, int(dim))
    vec = [0.0] * dim
    words = [w.lower() for w in re.findall(r'\w+', _norm_text(text or ''))]
    for w in words:
        vec[_bucket('w:' + w, dim)] += 1.0
        padded = f'#{w}#'
        for k in range(len(padded) - 2):
            vec[_bucket('t:' + padded[k : k + 3], dim)] += 0.5
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0:
        vec[0] = 1.0
        return vec
    return [v / norm for v in vec]


# --------------------------------------------------------------------------------------
# The brain
# --------------------------------------------------------------------------------------


class ScriptedBrain:
    """Answers graphiti's structured prompts; dispatches on the response-model name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # fact text key -> triples this brain produced for it (used by EdgeDuplicate)
        self._fact_triples: dict[str, set[tuple[str, str, str]]] = {}
        self.gate_decisions: Counter = Counter()   # True (keep) / False (skip) -> count
        self.unanswered: Counter = Counter()       # schema name -> minimal-instance answers

    # -- entry point ------------------------------------------------------------------
    def answer(self, name: str | None, schema: dict | None, prompt: str, turn: str | None = None) -> Any:
        """`turn`: the text of the request's first user message (what a gate decides on)."""
        handler = {
            'ExtractedEntities': self.extracted_entities,
            'NodeResolutions': self.node_resolutions,
            'NodeDuplicate': self.node_duplicate,
            'ExtractedEdges': self.extracted_edges,
            'EdgeDuplicate': self.edge_duplicate,
            'EdgeTimestamps': self.edge_timestamps,
            'BatchEdgeTimestamps': self.batch_edge_timestamps,
            'SummarizedEntities': self.summarized_entities,
            'EntitySummary': self.single_summary,
            'Summary': self.single_summary,
            'SagaSummary': self.single_summary,
            'SummaryDescription': self.summary_description,
            'CombinedExtraction': self.combined_extraction,
        }.get(name or '')
        if name == 'MemoryGateDecision':    # MemoryPlus's own call (engine/llm_calls.py)
            result = self.memory_gate(turn if turn is not None else prompt, schema)
        elif handler is not None:
            result = handler(prompt)
        elif schema is not None:
            with self._lock:      # a schema nobody answers: counted, so a run can require none
                self.unanswered[name or '?'] += 1
            result = minimal_instance(schema)
        else:
            result = {}
        if schema is not None:
            result = fill_required(result, schema)
        return result

    # -- MemoryPlus's own calls -------------------------------------------------------
    def memory_gate(self, turn: str, schema: dict | None) -> dict:
        """A keep/skip decision read from the turn itself, as a model would judge it: keep a
        turn whose first speaker states something (about themselves, or naming someone or
        something), skip one that only asks a general question or makes small talk. The
        answer fills the schema's boolean (the decision) and string (the reason) fields."""
        lines = [ln for ln in _norm_text(turn or '').splitlines()
                 if not re.fullmatch(r'\s*</?[A-Za-z_][\w -]*>\s*', ln)]   # wrapper tags
        utterances = parse_conversation('\n'.join(lines))
        speaker = utterances[0].speaker if utterances else None
        own = [u.text for u in utterances if u.speaker == speaker]
        keep, reason = False, 'small talk'
        for sentence in (s for text in own for s in split_sentences(text)):
            if sentence.rstrip().endswith('?'):
                reason = 'a general question'
                continue
            words = [w.lower() for w in _words(sentence)]
            named = [n for n, start, _end in capitalised_phrases(sentence) if start > 0]
            if any(w in _FIRST_PERSON for w in words):
                keep, reason = True, 'something about the speaker'
                break
            if named:
                keep, reason = True, f'something about {named[0]}'
                break
        with self._lock:
            self.gate_decisions[keep] += 1
        props = (schema or {}).get('properties') or {}
        flag = next((k for k, v in props.items() if isinstance(v, dict) and v.get('type') == 'boolean'),
                    'remember')
        why = next((k for k, v in props.items() if isinstance(v, dict) and v.get('type') == 'string'),
                   'reason')
        return {flag: keep, why: reason}

    # -- shared pieces ----------------------------------------------------------------
    @staticmethod
    def _episode_utterances(prompt: str) -> tuple[list[Utterance], str]:
        for tag in ('CURRENT MESSAGE', 'CURRENT MESSAGES', 'CURRENT_MESSAGE'):
            sec = _section(prompt, tag)
            if sec is not None:
                return parse_conversation(sec), 'message'
        sec = _section(prompt, 'TEXT')
        if sec is not None:
            return parse_conversation(sec, speakers=False), 'text'
        sec = _section(prompt, 'JSON')
        if sec is not None:
            val = _parse_literal(sec)
            strings: list[str] = []

            def walk(v: Any) -> None:
                if isinstance(v, str):
                    strings.append(v)
                elif isinstance(v, dict):
                    for x in v.values():
                        walk(x)
                elif isinstance(v, list):
                    for x in v:
                        walk(x)

            walk(val if val is not None else sec)
            return [Utterance(None, s.rstrip('.') + '.') for s in strings if s.strip()], 'json'
        return [], 'none'

    def _entities(self, prompt: str) -> list[tuple[Mention, int]]:
        utterances, _kind = self._episode_utterances(prompt)
        types = parse_entity_types(_section(prompt, 'ENTITY TYPES'))
        mentions = extract_entity_mentions(utterances)
        return [(m, choose_entity_type(types, m.context | set(_words(m.name)))) for m in mentions]

    def _remember(self, triples: Iterable[Triple]) -> None:
        with self._lock:
            for t in triples:
                self._fact_triples.setdefault(_norm_key(t.fact), set()).add(
                    (_norm_key(t.source), t.relation, _norm_key(t.target))
                )

    def _triples_of(self, fact: str) -> set[tuple[str, str, str]]:
        with self._lock:
            known = self._fact_triples.get(_norm_key(fact))
        if known:
            return set(known)
        return set(parse_fact_triples(fact))

    # -- extraction -------------------------------------------------------------------
    def extracted_entities(self, prompt: str) -> dict:
        return {
            'extracted_entities': [
                {'name': m.name, 'entity_type_id': tid, 'episode_indices': sorted(m.episodes) or [0]}
                for m, tid in self._entities(prompt)
            ]
        }

    def extracted_edges(self, prompt: str) -> dict:
        utterances, _kind = self._episode_utterances(prompt)
        nodes = _parse_literal(_section(prompt, 'ENTITIES'))
        names: list[str] = []
        labels: dict[str, list[str]] = {}
        if isinstance(nodes, list):
            for n in nodes:
                if isinstance(n, dict) and isinstance(n.get('name'), str):
                    names.append(n['name'])
                    labels[n['name']] = list(n.get('entity_types') or n.get('labels') or [])
        fact_types, strict = parse_fact_types(prompt)
        triples = extract_triples(utterances, names, labels, fact_types, strict)
        self._remember(triples)
        return {
            'edges': [
                {
                    'source_entity_name': t.source,
                    'target_entity_name': t.target,
                    'relation_type': t.relation,
                    'fact': t.fact,
                    'valid_at': None,
                    'invalid_at': None,
                    'episode_indices': [t.episode],
                }
                for t in triples
            ]
        }

    def combined_extraction(self, prompt: str) -> dict:
        utterances, _kind = self._episode_utterances(prompt)
        ents = self._entities(prompt)
        types = parse_entity_types(_section(prompt, 'ENTITY TYPES'))
        type_names = {int(t['entity_type_id']): str(t.get('entity_type_name')) for t in types}
        names = [m.name for m, _ in ents]
        labels = {m.name: [type_names.get(tid, 'Entity')] for m, tid in ents}
        fact_types, strict = parse_fact_types(prompt)
        triples = extract_triples(utterances, names, labels, fact_types, strict)
        self._remember(triples)
        return {
            'extracted_entities': [{'name': m.name, 'entity_type_id': tid} for m, tid in ents],
            'edges': [
                {
                    'source_entity_name': t.source,
                    'target_entity_name': t.target,
                    'relation_type': t.relation,
                    'fact': t.fact,
                    'episode_indices': [t.episode],
                }
                for t in triples
            ],
        }

    # -- resolution -------------------------------------------------------------------
    def node_resolutions(self, prompt: str) -> dict:
        extracted = _parse_literal(_section(prompt, 'ENTITIES'))
        existing = _parse_literal(_section(prompt, 'EXISTING ENTITIES'))
        existing = existing if isinstance(existing, list) else []
        index = {}
        for i, e in enumerate(existing):
            if isinstance(e, dict) and isinstance(e.get('name'), str):
                index.setdefault(_norm_key(e['name']), int(e.get('candidate_id', e.get('idx', i))))
        out = []
        for i, e in enumerate(extracted if isinstance(extracted, list) else []):
            if not isinstance(e, dict):
                continue
            name = str(e.get('name', ''))
            out.append({
                'id': int(e.get('id', i)),
                'name': name,
                'duplicate_candidate_id': index.get(_norm_key(name), -1),
            })
        return {'entity_resolutions': out}

    def node_duplicate(self, prompt: str) -> dict:
        new = _parse_literal(_section(prompt, 'NEW ENTITY'))
        name = new.get('name', '') if isinstance(new, dict) else str(new or '')
        existing = _parse_literal(_section(prompt, 'EXISTING ENTITIES'))
        dup = -1
        for i, e in enumerate(existing if isinstance(existing, list) else []):
            if isinstance(e, dict) and _norm_key(str(e.get('name', ''))) == _norm_key(name):
                dup = int(e.get('candidate_id', e.get('idx', i)))
                break
        return {'id': int(new.get('id', 0)) if isinstance(new, dict) else 0, 'name': name, 'duplicate_candidate_id': dup}

    def edge_duplicate(self, prompt: str) -> dict:
        existing = _parse_literal(_section(prompt, 'EXISTING FACTS'))
        candidates = _parse_literal(_section(prompt, 'FACT INVALIDATION CANDIDATES'))
        new_fact = _section(prompt, 'NEW FACT') or ''
        existing = [e for e in (existing or []) if isinstance(e, dict)] if isinstance(existing, list) else []
        candidates = [e for e in (candidates or []) if isinstance(e, dict)] if isinstance(candidates, list) else []
        new_key = _norm_key(new_fact)
        duplicates = [int(e['idx']) for e in existing if 'idx' in e and _norm_key(str(e.get('fact', ''))) == new_key]
        new_triples = [(src, _relation_core(r), r, tgt) for src, r, tgt in self._triples_of(new_fact)]
        contradicted: list[int] = []
        for e in existing + candidates:
            if 'idx' not in e:
                continue
            fact = str(e.get('fact', ''))
            if _norm_key(fact) == new_key:
                continue
            if any(self._contradicts(n, o) for n in new_triples
                   for o in [(s, _relation_core(r), r, t) for s, r, t in self._triples_of(fact)]):
                contradicted.append(int(e['idx']))
        return {'duplicate_facts': duplicates, 'contradicted_facts': sorted(set(contradicted))}

    @staticmethod
    def _contradicts(new: tuple, old: tuple) -> bool:
        """Same source and relation with a different target (LIVES_IN Berlin vs LIVES_IN
        Paris), or the new fact negates the old one (DOES_NOT_LIVE_IN Berlin)."""
        n_src, (n_neg, n_core), n_rel, n_tgt = new
        o_src, (o_neg, o_core), o_rel, o_tgt = old
        if n_src != o_src or n_core != o_core:
            return False
        if n_neg and not o_neg:
            return n_tgt == o_tgt
        if n_neg or o_neg or _is_multi_valued(n_rel):
            return False
        return n_tgt != o_tgt

    # -- timestamps -------------------------------------------------------------------
    @staticmethod
    def _timestamps_for(fact: str, reference: str | None) -> dict:
        ref = _parse_time(reference)
        if ref is None:
            return {'valid_at': None, 'invalid_at': None}
        if _TERMINATION_RE.search(fact or ''):
            return {'valid_at': None, 'invalid_at': _iso_z(ref)}
        return {'valid_at': _iso_z(ref), 'invalid_at': None}

    def edge_timestamps(self, prompt: str) -> dict:
        return self._timestamps_for(_section(prompt, 'FACT') or '', _section(prompt, 'REFERENCE TIME'))

    def batch_edge_timestamps(self, prompt: str) -> dict:
        facts = _parse_literal(_section(prompt, 'FACTS'))
        out = []
        for f in facts if isinstance(facts, list) else []:
            if isinstance(f, dict):
                out.append(self._timestamps_for(str(f.get('fact', '')), str(f.get('reference_time', ''))))
            else:
                out.append({'valid_at': None, 'invalid_at': None})
        return {'timestamps': out}

    # -- summaries --------------------------------------------------------------------
    @staticmethod
    def _message_utterances(prompt: str) -> list[Utterance]:
        texts: list[str] = []
        for tag in ('MESSAGES', 'EPISODES'):
            sec = _section(prompt, tag)
            if sec is not None:
                texts.extend(_texts_from_values(_json_values(sec)))
        out: list[Utterance] = []
        for t in texts:
            out.extend(parse_conversation(t))
        return out

    @staticmethod
    def _summarise(name: str, existing: str, utterances: list[Utterance]) -> str:
        key = _norm_key(name)
        pat = re.compile(r'(?<![\w])' + re.escape(_norm_text(name)) + r'(?![\w])', re.I)
        sentences: list[str] = [s for s in split_sentences(existing or '')]
        have = {_norm_key(s) for s in sentences}
        for u in utterances:
            is_speaker = u.speaker is not None and _norm_key(u.speaker) == key
            for sent in split_sentences(u.text):
                fp = bool(re.search(r"(?<![\w'])(?:I|[Mm]y|[Mm]e|I'm|I've)(?![\w])", _norm_text(sent)))
                if (is_speaker and fp) or pat.search(sent):
                    rewritten = rewrite_first_person(sent, u.speaker if fp else None)
                    if not rewritten.endswith(('.', '!', '?')):
                        rewritten += '.'
                    k = _norm_key(rewritten)
                    if k and k not in have:
                        have.add(k)
                        sentences.append(rewritten)
        kept: list[str] = []
        total = 0
        for s in reversed(sentences):  # newest information wins when over the cap
            if total + len(s) + 1 > MAX_SUMMARY_CHARS:
                break
            kept.append(s)
            total += len(s) + 1
        return ' '.join(reversed(kept))

    def summarized_entities(self, prompt: str) -> dict:
        entities = _parse_literal(_section(prompt, 'ENTITIES'))
        utterances = self._message_utterances(prompt)
        out = []
        for e in entities if isinstance(entities, list) else []:
            if not isinstance(e, dict) or not isinstance(e.get('name'), str):
                continue
            summary = self._summarise(e['name'], str(e.get('summary') or ''), utterances)
            if summary:
                out.append({'name': e['name'], 'summary': summary})
        return {'summaries': out}

    def single_summary(self, prompt: str) -> dict:
        entity = _section(prompt, 'ENTITY')
        utterances = self._message_utterances(prompt)
        if entity is not None:
            val = _parse_literal(entity)
            name = val.get('name', '') if isinstance(val, dict) else entity.strip()
            existing = ''
            if isinstance(val, dict):
                existing = str(val.get('summary') or '')
            existing = existing or (_section(prompt, 'ENTITY CONTEXT') or '')
            return {'summary': self._summarise(str(name), existing, utterances)}
        pieces: list[str] = []
        knowledge = _section(prompt, 'EXISTING_KNOWLEDGE')
        if knowledge:
            pieces.append(knowledge)
        m = re.search(r'Summaries:\s*', prompt)
        if m:
            pieces.extend(_texts_from_values(_json_values(prompt[m.end():].split('\n\n')[0])))
        msgs = _section(prompt, 'MESSAGES')
        if msgs and not utterances:
            utterances = parse_conversation(msgs.replace('\n---\n', '\n'))
        for u in utterances:
            for sent in split_sentences(u.text):
                fp = bool(re.search(r"(?<![\w'])(?:I|[Mm]y|[Mm]e)(?![\w])", sent))
                pieces.append(rewrite_first_person(sent, u.speaker if fp else None))
        text, seen = [], set()
        for p in pieces:
            k = _norm_key(p)
            if k and k not in seen:
                seen.add(k)
                text.append(p.strip())
        return {'summary': ' '.join(text)[:MAX_SUMMARY_CHARS]}

    def summary_description(self, prompt: str) -> dict:
        m = re.search(r'Summary:\s*', prompt)
        body = prompt[m.end():] if m else prompt
        vals = _texts_from_values(_json_values(body.split('\n\n')[0]))
        words = _words(vals[0] if vals else body)[:12]
        return {'description': ('Summary of: ' + ' '.join(words)).strip()}


# --------------------------------------------------------------------------------------
# Request helpers (usable from chat_reply callbacks)
# --------------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and isinstance(p.get('text'), str):
                parts.append(p['text'])
        return '\n'.join(parts)
    return ''


def _messages_of(body: dict) -> list[tuple[str, str]]:
    """(role, text) of a chat-completions or responses request, system/instructions first."""
    out: list[tuple[str, str]] = []
    if isinstance(body.get('instructions'), str):
        out.append(('system', body['instructions']))
    msgs = body.get('messages')
    if isinstance(msgs, list):
        for m in msgs:
            if isinstance(m, dict):
                out.append((str(m.get('role', 'user')), _content_text(m.get('content'))))
    inp = body.get('input')
    if isinstance(inp, str):
        out.append(('user', inp))
    elif isinstance(inp, list):
        for m in inp:
            if isinstance(m, dict) and ('role' in m or m.get('type') == 'message'):
                out.append((str(m.get('role', 'user')), _content_text(m.get('content'))))
    return out


def request_text(body: dict) -> str:
    """All prompt text of a chat-completions / responses request."""
    return '\n\n'.join(t for _r, t in _messages_of(body) if t)


def _first_user_text(body: dict) -> str:
    """The first user message: what a request is about (a client's retry appends its error
    note as a later user message, e.g. graphiti's after an answer that was not valid JSON)."""
    return next((text for role, text in _messages_of(body) if role == 'user'), '')


def last_user_text(body: dict) -> str:
    """Text of the last user message of a chat-completions / responses request."""
    for role, text in reversed(_messages_of(body)):
        if role == 'user':
            return text
    return ''


def mask_secret(value: str) -> str:
    """How a recorded key is shown: its first 3 and last 4 characters and a short digest,
    enough to tell two keys apart, never the key."""
    digest = hashlib.sha256(value.encode('utf-8')).hexdigest()[:8]
    return f'{value[:3]}…{value[-4:]}#{digest}' if len(value) > 12 else f'…#{digest}'


def _bearer(headers: Any) -> str | None:
    """The API key of a request: `Authorization: Bearer <key>` (OpenAI), else `api-key`."""
    if headers is None:
        return None
    auth = headers.get('Authorization') or ''
    if auth.lower().startswith('bearer '):
        return auth[7:].strip() or None
    return headers.get('api-key') or headers.get('x-goog-api-key') or None


def _default_chat_reply(body: dict) -> str:
    snippet = ' '.join(last_user_text(body).split())
    if len(snippet) > 80:
        snippet = snippet[:77] + '...'
    return f'(scripted reply) You said: "{snippet}"' if snippet else '(scripted reply) Hello!'


# --------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    remaining: int
    retry_after: float = 1
    llm: bool = True
    embeddings: bool = False
    structured_only: bool = False

    def applies(self, kind: str, structured: bool) -> bool:
        if kind == 'embeddings':
            return self.embeddings
        if kind in ('chat', 'responses'):
            return self.llm and (structured or not self.structured_only)
        return False


# --------------------------------------------------------------------------------------
# HTTP server
# --------------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, owner: ScriptedLLMServer):
        self.owner = owner
        self._lock = threading.Lock()
        self._conn_threads: set[threading.Thread] = set()
        self._conns: set[socket.socket] = set()
        super().__init__(addr, handler)

    def process_request(self, request, client_address):  # one thread per connection
        t = threading.Thread(target=self._serve_conn, args=(request, client_address),
                             name='scripted-llm-conn', daemon=True)
        with self._lock:
            self._conn_threads.add(t)
            self._conns.add(request)
        t.start()

    def _serve_conn(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self._lock:
                self._conns.discard(request)
                self._conn_threads.discard(threading.current_thread())

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            return
        log.exception('scripted LLM server: error while serving %s', client_address)

    def close_connections(self) -> list[threading.Thread]:
        with self._lock:
            conns = list(self._conns)
            threads = list(self._conn_threads)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return threads


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'ScriptedLLM/1.0'
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug('scripted LLM: ' + format, *args)

    # -- plumbing ---------------------------------------------------------------------
    def _route(self) -> str:
        path = urlsplit(self.path).path.rstrip('/')
        return path[3:] if path.startswith('/v1/') or path == '/v1' else path

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(obj).encode('utf-8')
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_error_json(self, status: int, message: str, etype: str, code: str | None = None,
                         headers: dict[str, str] | None = None) -> None:
        self._send_json(status, {'error': {'message': message, 'type': etype, 'param': None, 'code': code}}, headers)

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header('Content-Type', 'text/event-stream; charset=utf-8')
        self.send_header('Cache-Control', 'no-cache')
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()

    def _sse(self, data: Any, event: str | None = None) -> None:
        payload = data if isinstance(data, str) else json.dumps(data)
        chunk = (f'event: {event}\n' if event else '') + f'data: {payload}\n\n'
        raw = chunk.encode('utf-8')
        self.wfile.write(f'{len(raw):x}\r\n'.encode() + raw + b'\r\n')
        self.wfile.flush()
        owner = self.server.owner
        if owner.stream_chunk_delay_s > 0:
            owner._sleep(owner.stream_chunk_delay_s)

    def _end_sse(self) -> None:
        self.wfile.write(b'0\r\n\r\n')
        self.wfile.flush()

    # -- verbs ------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        owner = self.server.owner
        route = self._route()
        owner._record(self.path, None, self.headers)
        if route == '/models':
            self._send_json(200, {'object': 'list', 'data': [owner._model_card(m) for m in owner.model_ids]})
        elif route.startswith('/models/'):
            self._send_json(200, owner._model_card(route[len('/models/'):]))
        elif route in ('', '/health'):
            self._send_json(200, {'status': 'ok'})
        else:
            self._send_error_json(404, f'Unknown path {self.path}', 'invalid_request_error', 'not_found')

    def do_POST(self) -> None:  # noqa: N802
        owner = self.server.owner
        route = self._route()
        length = int(self.headers.get('Content-Length') or 0)
        raw = self.rfile.read(length) if length else b''
        try:
            body = json.loads(raw or b'{}')
        except ValueError:
            owner._record(self.path, None, self.headers)
            self._send_error_json(400, 'Body is not valid JSON', 'invalid_request_error')
            return
        owner._record(self.path, body, self.headers)
        if not isinstance(body, dict):
            self._send_error_json(400, 'Body must be a JSON object', 'invalid_request_error')
            return
        if route == '/chat/completions':
            self._llm(body, 'chat')
        elif route == '/responses':
            self._llm(body, 'responses')
        elif route == '/embeddings' and owner.serve_embeddings:
            self._embeddings(body)
        else:
            self._send_error_json(404, f'Unknown path {self.path}', 'invalid_request_error', 'not_found')

    # -- faults -----------------------------------------------------------------------
    def _pre(self, kind: str, structured: bool) -> Fault | None:
        """Apply latency and faults; returns the fault (or None); an answered fault sets
        self._answered."""
        owner = self.server.owner
        fault = owner._take_fault(kind, structured)
        if kind != 'embeddings' or owner.latency_embeddings:
            if owner.latency_s > 0:
                owner._sleep(owner.latency_s)
        self._answered = False
        if fault is None:
            return None
        if fault.kind == '429':
            ra = fault.retry_after
            ra_text = str(int(ra)) if float(ra).is_integer() else str(ra)
            self._send_error_json(429, 'Rate limit reached (scripted fault).', 'requests', 'rate_limit_exceeded',
                                  {'Retry-After': ra_text})
            self._answered = True
        elif fault.kind == '500':
            self._send_error_json(500, 'The server had an error (scripted fault).', 'server_error')
            self._answered = True
        elif fault.kind == '401':
            self._send_error_json(401, 'Incorrect API key provided (scripted fault).',
                                  'invalid_request_error', 'invalid_api_key')
            self._answered = True
        elif fault.kind == 'timeout':
            owner._sleep(owner.timeout_hold_s)
            if owner._stopping.is_set():
                self.close_connection = True
                self._answered = True
        return fault

    # -- LLM endpoints ----------------------------------------------------------------
    def _llm(self, body: dict, api: str) -> None:
        owner = self.server.owner
        name, schema, structured = owner._structured_target(body, api)
        prompt = request_text(body)
        is_rerank = api == 'chat' and bool(body.get('logprobs')) and not structured
        call_name = name or ('rerank' if is_rerank else 'json_object' if structured else 'chat')
        owner._count(call_name, len(prompt) // 4)
        fault = self._pre(api, structured)
        if self._answered:
            return
        logprobs = None
        if structured:
            try:
                answer = owner.brain.answer(name, schema, prompt, turn=_first_user_text(body))
            except Exception as exc:  # never fail the request because of a heuristic
                log.exception('scripted brain failed for %s', name)
                owner._brain_error(name, exc)
                answer = minimal_instance(schema) if schema else {}
            text = json.dumps(answer, ensure_ascii=False)
        elif is_rerank:
            text, logprobs = owner._rerank_answer(prompt)
        else:
            reply = owner.chat_reply(body) if owner.chat_reply is not None else _default_chat_reply(body)
            text = str(reply)
        if fault is not None and fault.kind == 'garbage':
            text = text[: max(1, len(text) // 2)] + '\u2026 <<truncated'
            if not text.startswith('{'):
                text = '{"' + text
        elif fault is not None and fault.kind == 'think':
            text = ('<think>\nLet me think about this step by step. The user wants a JSON answer; '
                    'I will produce it now.\n</think>\n') + text
        model = str(body.get('model') or DEFAULT_MODEL_ID)
        in_tok, out_tok = max(1, len(prompt) // 4), max(1, len(text) // 4)
        if api == 'chat':
            if body.get('stream'):
                self._stream_chat(body, model, text, in_tok, out_tok)
            else:
                self._send_json(200, _chat_completion(model, text, in_tok, out_tok, logprobs))
        else:
            if body.get('stream'):
                self._stream_responses(body, model, text, in_tok, out_tok)
            else:
                self._send_json(200, _response_object(body, model, text, in_tok, out_tok))

    def _stream_chat(self, body: dict, model: str, text: str, in_tok: int, out_tok: int) -> None:
        cid = 'chatcmpl-' + uuid.uuid4().hex[:24]
        created = int(time.time())

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {'id': cid, 'object': 'chat.completion.chunk', 'created': created, 'model': model,
                    'system_fingerprint': 'scripted',
                    'choices': [{'index': 0, 'delta': delta, 'logprobs': None, 'finish_reason': finish}]}

        self._start_sse()
        self._sse(chunk({'role': 'assistant', 'content': ''}))
        for piece in _pieces(text):
            self._sse(chunk({'content': piece}))
        self._sse(chunk({}, 'stop'))
        if (body.get('stream_options') or {}).get('include_usage'):
            self._sse({'id': cid, 'object': 'chat.completion.chunk', 'created': created, 'model': model,
                       'choices': [], 'usage': _chat_usage(in_tok, out_tok)})
        self._sse('[DONE]')
        self._end_sse()

    def _stream_responses(self, body: dict, model: str, text: str, in_tok: int, out_tok: int) -> None:
        rid = 'resp_' + uuid.uuid4().hex
        mid = 'msg_' + uuid.uuid4().hex
        created = time.time()
        seq = 0

        def ev(etype: str, **fields: Any) -> None:
            nonlocal seq
            self._sse({'type': etype, 'sequence_number': seq, **fields}, event=etype)
            seq += 1

        pending = _response_object(body, model, '', in_tok, 0, status='in_progress', rid=rid, mid=mid, created=created)
        pending['output'] = []
        pending['usage'] = None
        self._start_sse()
        ev('response.created', response=pending)
        ev('response.in_progress', response=pending)
        ev('response.output_item.added', output_index=0,
           item={'id': mid, 'type': 'message', 'status': 'in_progress', 'role': 'assistant', 'content': []})
        ev('response.content_part.added', item_id=mid, output_index=0, content_index=0,
           part={'type': 'output_text', 'text': '', 'annotations': [], 'logprobs': []})
        for piece in _pieces(text):
            ev('response.output_text.delta', item_id=mid, output_index=0, content_index=0, delta=piece, logprobs=[])
        ev('response.output_text.done', item_id=mid, output_index=0, content_index=0, text=text, logprobs=[])
        part = {'type': 'output_text', 'text': text, 'annotations': [], 'logprobs': []}
        ev('response.content_part.done', item_id=mid, output_index=0, content_index=0, part=part)
        item = {'id': mid, 'type': 'message', 'status': 'completed', 'role': 'assistant', 'content': [part]}
        ev('response.output_item.done', output_index=0, item=item)
        final = _response_object(body, model, text, in_tok, out_tok, rid=rid, mid=mid, created=created)
        ev('response.completed', response=final)
        self._end_sse()

    # -- embeddings -------------------------------------------------------------------
    def _embeddings(self, body: dict) -> None:
        owner = self.server.owner
        inp = body.get('input')
        if isinstance(inp, str):
            texts = [inp]
        elif isinstance(inp, list) and inp and all(isinstance(x, int) for x in inp):
            texts = [' '.join(str(x) for x in inp)]
        elif isinstance(inp, list):
            texts = [x if isinstance(x, str) else ' '.join(str(t) for t in x) if isinstance(x, list) else str(x)
                     for x in inp]
        else:
            self._send_error_json(400, "'input' is required", 'invalid_request_error')
            return
        tokens = sum(len(t) for t in texts) // 4
        owner._count('embeddings', 0, embedding_tokens=tokens)
        fault = self._pre('embeddings', False)
        if self._answered:
            return
        dim = body.get('dimensions')
        dim = int(dim) if isinstance(dim, int) and dim > 0 else owner.embedding_dim
        b64 = body.get('encoding_format') == 'base64'
        data = []
        for i, t in enumerate(texts):
            vec = embed_text(t, dim)
            emb: Any = base64.b64encode(struct.pack(f'<{dim}f', *vec)).decode('ascii') if b64 else vec
            data.append({'object': 'embedding', 'index': i, 'embedding': emb})
        obj = {'object': 'list', 'data': data, 'model': str(body.get('model') or 'scripted-embedding'),
               'usage': {'prompt_tokens': max(1, tokens), 'total_tokens': max(1, tokens)}}
        if fault is not None and fault.kind == 'garbage':
            raw = json.dumps(obj).encode('utf-8')
            self._send_json(200, None, raw=raw[: max(1, len(raw) // 2)])
            return
        self._send_json(200, obj)


def _pieces(text: str, size: int = 24) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or ['']


def _chat_usage(in_tok: int, out_tok: int) -> dict:
    return {'prompt_tokens': in_tok, 'completion_tokens': out_tok, 'total_tokens': in_tok + out_tok}


def _chat_completion(model: str, text: str, in_tok: int, out_tok: int, logprobs: dict | None = None) -> dict:
    return {
        'id': 'chatcmpl-' + uuid.uuid4().hex[:24],
        'object': 'chat.completion',
        'created': int(time.time()),
        'model': model,
        'system_fingerprint': 'scripted',
        'choices': [{
            'index': 0,
            'message': {'role': 'assistant', 'content': text, 'refusal': None},
            'logprobs': logprobs,
            'finish_reason': 'stop',
        }],
        'usage': _chat_usage(in_tok, out_tok),
    }


def _response_object(body: dict, model: str, text: str, in_tok: int, out_tok: int, *, status: str = 'completed',
                     rid: str | None = None, mid: str | None = None, created: float | None = None) -> dict:
    created = created if created is not None else time.time()
    part = {'type': 'output_text', 'text': text, 'annotations': [], 'logprobs': []}
    text_cfg = body.get('text') if isinstance(body.get('text'), dict) else {'format': {'type': 'text'}}
    return {
        'id': rid or 'resp_' + uuid.uuid4().hex,
        'object': 'response',
        'created_at': created,
        'completed_at': time.time() if status == 'completed' else None,
        'status': status,
        'background': False,
        'error': None,
        'incomplete_details': None,
        'instructions': body.get('instructions'),
        'max_output_tokens': body.get('max_output_tokens'),
        'model': model,
        'output': [{
            'id': mid or 'msg_' + uuid.uuid4().hex,
            'type': 'message',
            'status': 'completed',
            'role': 'assistant',
            'content': [part],
        }],
        'parallel_tool_calls': bool(body.get('parallel_tool_calls', True)),
        'previous_response_id': body.get('previous_response_id'),
        'reasoning': {'effort': None, 'summary': None},
        'service_tier': 'default',
        'store': bool(body.get('store', False)),
        'temperature': body.get('temperature', 1.0),
        'text': text_cfg,
        'tool_choice': body.get('tool_choice', 'auto'),
        'tools': [],
        'top_p': body.get('top_p', 1.0),
        'truncation': 'disabled',
        'usage': {
            'input_tokens': in_tok,
            'input_tokens_details': {'cached_tokens': 0, 'cache_write_tokens': 0},
            'output_tokens': out_tok,
            'output_tokens_details': {'reasoning_tokens': 0},
            'total_tokens': in_tok + out_tok,
        },
        'user': None,
        'metadata': body.get('metadata') or {},
    }


class ScriptedLLMServer:
    """OpenAI-compatible scripted LLM on 127.0.0.1 (see the module docstring).

    Attributes
    ----------
    base_url: ``http://127.0.0.1:<port>/v1`` once started.
    latency_s: per-call sleep for chat/responses calls (settable at runtime);
        ``latency_embeddings=True`` applies it to /v1/embeddings too.
    timeout_hold_s: how long a "timeout" fault holds the connection (default 5 s).
    serve_embeddings: set False to answer /v1/embeddings with 404 (a chat-only server).
    requests: snapshot list of ``(path, parsed json body or None)``.
    calls: Counter per response-model / prompt kind (``'ExtractedEntities'``, ...,
        ``'chat'``, ``'rerank'``, ``'json_object'``, ``'embeddings'``).
    input_tokens: estimated prompt tokens (chars/4) over all LLM calls.
    tokens_by_name: Counter of those estimates per call name.
    faults_applied: Counter per fault kind actually applied.
    brain: the :class:`ScriptedBrain` (its fact memory lives as long as the server).
    """

    def __init__(self, latency_s: float = 0.0, chat_reply: Callable[[dict], str] | None = None, *,
                 port: int = 0, embedding_dim: int = DEFAULT_EMBEDDING_DIM, timeout_hold_s: float = 5.0,
                 model_ids: Iterable[str] = (DEFAULT_MODEL_ID,), max_recorded: int = 20000) -> None:
        self.latency_s = float(latency_s)
        self.chat_reply = chat_reply
        self.port = int(port)
        self.embedding_dim = int(embedding_dim)
        self.timeout_hold_s = float(timeout_hold_s)
        self.latency_embeddings = False
        # False: /v1/embeddings answers 404, as a chat-only OpenAI-compatible server does
        self.serve_embeddings = True
        self.stream_chunk_delay_s = 0.0
        self.model_ids = list(model_ids)
        self.max_recorded = int(max_recorded)
        self.brain = ScriptedBrain()
        self.base_url: str | None = None
        self._lock = threading.Lock()
        self._requests: list[tuple[str, Any]] = []
        self._keys: list[tuple[str, str | None]] = []   # (path, masked API key), as requests
        self._calls: Counter = Counter()
        self._tokens_by_name: Counter = Counter()
        self._input_tokens = 0
        self._embedding_tokens = 0
        self._faults: list[Fault] = []
        self._faults_applied: Counter = Counter()
        self._brain_errors: list[tuple[str | None, str]] = []
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> ScriptedLLMServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer(('127.0.0.1', self.port), _Handler, self)
        self.port = self._httpd.server_address[1]
        self.base_url = f'http://127.0.0.1:{self.port}/v1'
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={'poll_interval': 0.05},
                                        name='scripted-llm-server', daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        conn_threads = httpd.close_connections()
        httpd.server_close()
        deadline = time.monotonic() + timeout
        for t in [thread, *conn_threads]:
            if t is not None and t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        self._httpd = None
        self._thread = None

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- faults -----------------------------------------------------------------------
    def inject(self, kind: str, count: int = 1, retry_after: float = 1, *, embeddings: bool = False,
               llm: bool = True, structured_only: bool = False) -> None:
        """Queue a fault for the next ``count`` matching calls.

        kind: "429" (Retry-After header), "500", "timeout" (hold ``timeout_hold_s`` then
        answer), "401" (a refused key), "garbage" (200 with truncated/invalid JSON), "think" (valid answer
        prefixed by a <think> block).  By default it hits chat/responses calls (any,
        or only structured ones with ``structured_only=True``); ``embeddings=True`` lets
        it hit /v1/embeddings too (``llm=False`` for embeddings only).
        """
        kind = str(kind)
        if kind not in FAULT_KINDS:
            raise ValueError(f'unknown fault kind {kind!r}; expected one of {FAULT_KINDS}')
        if count < 1:
            return
        with self._lock:
            self._faults.append(Fault(kind, int(count), retry_after, llm, embeddings, structured_only))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def faults_pending(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(f.kind, f.remaining) for f in self._faults]

    @property
    def faults_applied(self) -> Counter:
        with self._lock:
            return Counter(self._faults_applied)

    def _take_fault(self, kind: str, structured: bool) -> Fault | None:
        with self._lock:
            for f in self._faults:
                if f.applies(kind, structured):
                    f.remaining -= 1
                    if f.remaining <= 0:
                        self._faults.remove(f)
                    self._faults_applied[f.kind] += 1
                    return f
        return None

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(max(0.0, seconds))

    # -- recording --------------------------------------------------------------------
    def _record(self, path: str, body: Any, headers: Any = None) -> None:
        key = _bearer(headers)
        with self._lock:
            self._requests.append((path, body))
            self._keys.append((path, mask_secret(key) if key else None))
            if self.max_recorded and len(self._requests) > self.max_recorded:
                del self._requests[: len(self._requests) - self.max_recorded]
                del self._keys[: len(self._keys) - self.max_recorded]

    def _count(self, name: str, input_tokens: int, embedding_tokens: int = 0) -> None:
        with self._lock:
            self._calls[name] += 1
            self._tokens_by_name[name] += input_tokens
            self._input_tokens += input_tokens
            self._embedding_tokens += embedding_tokens

    def _brain_error(self, name: str | None, exc: BaseException) -> None:
        with self._lock:
            self._brain_errors.append((name, repr(exc)))

    @property
    def requests(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self._requests)

    @property
    def api_keys(self) -> list[tuple[str, str | None]]:
        """(path, masked API key the request carried, or None) per recorded request; the key
        itself is never kept (compare with ``mask_secret(expected)``)."""
        with self._lock:
            return list(self._keys)

    def keys_sent_to(self, route: str) -> set[str | None]:
        """The masked keys of the requests whose path ends with `route` ('/embeddings', ...)."""
        return {k for p, k in self.api_keys if urlsplit(p).path.rstrip('/').endswith(route)}

    @property
    def calls(self) -> Counter:
        with self._lock:
            return Counter(self._calls)

    @property
    def tokens_by_name(self) -> Counter:
        with self._lock:
            return Counter(self._tokens_by_name)

    @property
    def input_tokens(self) -> int:
        with self._lock:
            return self._input_tokens

    @property
    def embedding_tokens(self) -> int:
        with self._lock:
            return self._embedding_tokens

    @property
    def unanswered(self) -> Counter:
        """Schemas answered only with a minimal valid instance (no handler knows them)."""
        with self.brain._lock:
            return Counter(self.brain.unanswered)

    @property
    def brain_errors(self) -> list[tuple[str | None, str]]:
        with self._lock:
            return list(self._brain_errors)

    def reset(self) -> None:
        """Forget recorded requests, counters and queued faults (not the brain's memory)."""
        with self._lock:
            self._requests.clear()
            self._keys.clear()
            self._calls.clear()
            self._tokens_by_name.clear()
            self._input_tokens = 0
            self._embedding_tokens = 0
            self._faults.clear()
            self._faults_applied.clear()
            self._brain_errors.clear()
        with self.brain._lock:
            self.brain.unanswered.clear()
            self.brain.gate_decisions.clear()

    # -- helpers used by the handler --------------------------------------------------
    @staticmethod
    def _model_card(model_id: str) -> dict:
        return {'id': model_id, 'object': 'model', 'created': 0, 'owned_by': 'memoryplus-scripted'}

    @staticmethod
    def _structured_target(body: dict, api: str) -> tuple[str | None, dict | None, bool]:
        """(schema name, schema, structured?) of a request."""
        fmt: Any = None
        if api == 'chat':
            fmt = body.get('response_format')
        else:
            text = body.get('text')
            fmt = text.get('format') if isinstance(text, dict) else None
        if not isinstance(fmt, dict):
            return None, None, False
        ftype = fmt.get('type')
        if ftype == 'json_schema':
            js = fmt.get('json_schema') if api == 'chat' else fmt
            js = js if isinstance(js, dict) else {}
            schema = js.get('schema') if isinstance(js.get('schema'), dict) else None
            name = js.get('name') or (schema or {}).get('title')
            return (str(name) if name else None), schema, True
        if ftype == 'json_object':
            prompt = request_text(body)
            schema = _schema_in_prompt(prompt)
            name = schema.get('title') if schema else None
            return (str(name) if name else None), schema, True
        return None, None, False

    @staticmethod
    def _rerank_answer(prompt: str) -> tuple[str, dict]:
        passage = _section(prompt, 'PASSAGE') or ''
        query = _section(prompt, 'QUERY') or ''
        a, b = _content_stems(_words(query)), _content_stems(_words(passage))
        jac = len(a & b) / len(a | b) if (a | b) else 0.0
        if jac > 0:
            token, p = 'True', 0.5 + 0.5 * jac
        else:
            token, p = 'False', 0.99
        other = 'False' if token == 'True' else 'True'
        lp, olp = math.log(p), math.log(max(1e-9, 1 - p))

        def entry(tok: str, l: float) -> dict:
            return {'token': tok, 'logprob': l, 'bytes': list(tok.encode())}

        logprobs = {'content': [{**entry(token, lp), 'top_logprobs': [entry(token, lp), entry(other, olp)]}],
                    'refusal': None}
        return token, logprobs


def _schema_in_prompt(prompt: str) -> dict | None:
    """The JSON schema graphiti appends in json_object mode ("Respond with a JSON object
    in the following format: {...}")."""
    marker = 'Respond with a JSON object in the following format:'
    i = prompt.rfind(marker)
    if i < 0:
        return None
    rest = prompt[i + len(marker):]
    j = rest.find('{')
    if j < 0:
        return None
    try:
        val, _ = json.JSONDecoder().raw_decode(rest, j)
    except ValueError:
        return None
    return val if isinstance(val, dict) else None


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m memoryplus.testing.scripted_llm',
        description='Run the scripted OpenAI-compatible LLM on 127.0.0.1 until Ctrl-C.',
    )
    parser.add_argument('--port', type=int, default=0, help='TCP port on 127.0.0.1 (0 = any free port)')
    parser.add_argument('--latency-ms', type=float, default=0.0, help='sleep per LLM call, in milliseconds')
    parser.add_argument('--embedding-dim', type=int, default=DEFAULT_EMBEDDING_DIM,
                        help='embedding size when the request has no "dimensions"')
    parser.add_argument('--verbose', action='store_true', help='log every request')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format='%(message)s')
    server = ScriptedLLMServer(latency_s=args.latency_ms / 1000.0, port=args.port, embedding_dim=args.embedding_dim)
    server.start()
    print(f'scripted LLM listening on {server.base_url}  (Ctrl-C to stop)', flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        calls = server.calls
        print(f'stopped; {sum(calls.values())} calls: {dict(calls)}', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
