"""The scripted LLM's second English extractor: conversation parsing, entity mentions and
their types, fact types, (subject, relation, target) triples and when two relations clash."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from memoryplus.testing.scripted_llm.english import (
    _CLAUSE_BREAK_RE, _CONNECTORS, _COPULA, _FILLER, _FP_POSSESSIVE, _MULTI_VALUED_HEADS, _ORG_SUFFIXES,
    _PLURAL_ROLES,
    _PLACE_CUES, _SKIP_INITIAL, _TEMPORAL_WORDS, _TITLES, _ALWAYS_SKIP, _expand_contractions, _split_camel,
    _third_person, _to_snake, rewrite_first_person)
from memoryplus.testing.scripted_llm.prompts import _parse_literal, _section
from memoryplus.testing.scripted_llm.own_text import (
    _WORD_RE, _content_stems, _norm_key, _norm_text, _stem, _words, split_sentences)

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
    if head == 'HAS':
        return relation[4:] in _PLURAL_ROLES      # HAS_SISTER yes, HAS_DENTIST no
    return head in _MULTI_VALUED_HEADS


# --------------------------------------------------------------------------------------
# JSON-schema helpers
# --------------------------------------------------------------------------------------
