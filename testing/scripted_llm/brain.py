"""The brain: answers graphiti's structured prompts (and MemoryPlus's memory gate)."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from memoryplus.testing.scripted_llm.english import _FIRST_PERSON, _TERMINATION_RE, rewrite_first_person
from memoryplus.testing.scripted_llm.extractor import (
    Mention, Triple, Utterance, _is_multi_valued, _relation_core, capitalised_phrases, choose_entity_type,
    extract_entity_mentions, extract_triples, parse_conversation, parse_entity_types, parse_fact_triples,
    parse_fact_types)
from memoryplus.testing.scripted_llm.prompts import (
    _iso_z, _json_values, _parse_literal, _parse_time, _section, _texts_from_values)
from memoryplus.testing.scripted_llm.schema_fill import fill_required, minimal_instance
from memoryplus.testing.scripted_llm.own_text import _norm_key, _norm_text, _words, split_sentences

MAX_SUMMARY_CHARS = 900  # graphiti caps summaries at 1000; stay under it


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
