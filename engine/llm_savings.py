"""LLM calls graphiti makes that a rule answers as well, skipped, or that it makes twice.

- Dates. graphiti 0.31.2 dates every new fact with its own LLM call
  (`extract_edges.extract_timestamps`, about one call per stored turn, a quarter of all calls).
  Its prompt says: an ongoing fact is valid from the reference time; resolve relative
  expressions from it; leave both null when no time is stated. A chat turn is its reference
  time, so when neither the fact nor the turn holds any time expression or past tense, the
  answer is known: valid from the turn, no end. Only then is the call skipped; anything
  temporal still goes to the LLM.
- Summaries. graphiti writes an entity's summary without the LLM while the entity's facts fit
  (it appends them), but asks the LLM for an entity that has no summary and no new fact: one
  the model named and linked to nothing (7 of the bench's first 30 turns). Its summary is
  then what the turn says about it: the turn's sentences that name it, with who said them.
  Only an entity the turn does not name word for word still goes to the LLM.
- Fact resolution asked twice. The model often gives one statement as several facts with the
  same text ("Freya is from Utrecht and lives in Krakow": Freya-Utrecht, Freya-Krakow). graphiti
  resolves each against the bank with its own call, each with the facts its search found for
  its pair of entities. They are asked once per turn (shown_once): the facts found for any of
  them, each text shown once (graphiti lists every edge, and the model cannot tell same-text
  edges apart), and what the model answers for a text holds for each fact of it.
- Facts found for the speaker's name alone. graphiti asks the model which facts of the bank
  a new fact contradicts, among those its hybrid search finds for the fact's text: cosine
  hits above its 0.6 floor and the best full-text (BM25) hits, with no floor. Nearly every
  fact of a chat bank names the speaker ("User's vet is Oskar"), so a full-text hit on that
  name alone is any short fact of the bank ("User's barber is Mei" found "User's vet is
  Oskar", "User's niece Ravi lives in Osaka" ...: 13 of the first 30 bench turns were asked
  about such facts alone). That search leaves the speakers' names out of its words
  (unnamed); facts it still finds by another word or by meaning are asked about as before,
  and with no fact found graphiti makes no call.
"""
from __future__ import annotations

import asyncio
import contextvars
import re
from dataclasses import dataclass, field

from graphiti_core import graphiti as graphiti_module
from graphiti_core.search.search_filters import SearchFilters
from graphiti_core.utils.datetime_utils import ensure_utc
from graphiti_core.utils.maintenance import edge_operations
from graphiti_core.utils.text_utils import MAX_SUMMARY_CHARS, truncate_at_sentence

from memoryplus.common.text import split_sentences
from memoryplus.engine.turn_index import split_body

RESOLVE_PROMPT = "dedupe_edges.resolve_edge"
# The speakers' names in a turn's text (Turn.body), as graphiti's facts name them.
SPEAKERS = re.compile(r"\b(?:User|Assistant)\b(?:['’]s)?", re.I)

_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|"
           "december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
TEMPORAL = re.compile(
    r"\d|\b(" + _MONTHS + r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|"
    r"today|tonight|tomorrow|yesterday|now|then|ago|since|until|till|before|after|during|when|"
    r"while|soon|later|earlier|recently|lately|already|still|anymore|longer|former|formerly|"
    r"previous|previously|used|once|ever|never|next|last|this|upcoming|past|future|"
    r"year|years|month|months|week|weeks|day|days|hour|hours|season|spring|summer|autumn|fall|"
    r"winter|morning|evening|night|birthday|anniversary|deadline|due|will|going|plan|plans|"
    r"planned|was|were|had|did|been|ex|quit|left|moved|retired|ended|stopped|started|began|"
    r"became|joined|switched|changed)\b", re.I)

_installed = False
# Only our engine's extraction is changed: graphiti used directly in the same process (the
# bench's stock baseline, tests of graphiti itself) keeps its own behaviour.
active: contextvars.ContextVar[bool] = contextvars.ContextVar("memoryplus_llm_savings", default=False)
# Texts of the facts already dated in this call (by llm_combined's batch dating).
settled: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("memoryplus_settled_dates",
                                                                          default=None)
# The fact resolutions of this call (one turn), by new fact text: each asked once, then shared.
asked: contextvars.ContextVar[dict[str, "_Resolution"] | None] = contextvars.ContextVar(
    "memoryplus_resolution_answers", default=None)


def is_timeless(text: str) -> bool:
    """No date, time word, tense marker or change verb: the fact holds as of when it was said."""
    return not TEMPORAL.search(text or "")


def unnamed(fact: str) -> str:
    """A fact's words for the full-text search of the facts it might contradict: the
    speakers' names left out, or the fact as it is if nothing else is left."""
    words = SPEAKERS.sub(" ", fact)
    return words if words.strip(" .,;:!?'\"") else fact


def said_about(name: str, episode_text: str) -> str:
    """The sentences of a turn that name `name` (or all that a speaker named so said), each
    with its speaker, within graphiti's summary length; "" when the turn does not name it."""
    if not name.strip():
        return ""
    named = re.compile(r"(?<!\w)" + re.escape(name.strip()) + r"(?!\w)", re.I)
    found = []
    for label, text in zip(("User", "Assistant"), split_body(episode_text)):
        speaker_named = named.fullmatch(label) is not None
        found += [f"{label}: {s}" for s in split_sentences(text) if speaker_named or named.search(s)]
    return truncate_at_sentence(" ".join(found), MAX_SUMMARY_CHARS)


def shown_once(contexts: list[dict]) -> tuple[dict, list[str]]:
    """One fact-resolution context for the facts of one text resolved in one turn, built
    from graphiti's context for each: every fact text shown once, as an EXISTING FACT if it
    is one for any of them (graphiti lists one edge per pair of entities, and the model
    cannot tell same-text edges apart). Returns it and the fact texts by the idx shown."""
    existing: list[str] = []
    candidates: list[str] = []
    for key, kept in (("existing_edges", existing), ("edge_invalidation_candidates", candidates)):
        for context in contexts:
            for item in context.get(key) or []:
                if item["fact"] not in existing and item["fact"] not in candidates:
                    kept.append(item["fact"])
    shown = dict(contexts[0],
                 existing_edges=[{"idx": i, "fact": t} for i, t in enumerate(existing)],
                 edge_invalidation_candidates=[{"idx": len(existing) + i, "fact": t}
                                               for i, t in enumerate(candidates)])
    return shown, existing + candidates


def answered_for(answer: dict, texts: list[str], context: dict) -> dict:
    """The model's answer to a shown_once context, in the idx values of `context`, one of
    those it was built from: a fact text found a duplicate stands for each of the context's
    EXISTING FACTS with that text, a text contradicted for each of its facts with that
    text. An idx out of range stays out of range, for graphiti to report."""
    existing = context.get("existing_edges") or []
    every = existing + (context.get("edge_invalidation_candidates") or [])
    as_existing: dict[str, list[int]] = {}
    as_any: dict[str, list[int]] = {}
    for n, item in enumerate(every):
        if n < len(existing):
            as_existing.setdefault(item["fact"], []).append(item["idx"])
        as_any.setdefault(item["fact"], []).append(item["idx"])

    def back(values, table: dict[str, list[int]]) -> list[int]:
        out: list[int] = []
        for i in values or []:
            mine = (table.get(texts[i], []) if 0 <= i < len(texts)
                    else [i if i < 0 else len(every) + i - len(texts)])
            out += [o for o in mine if o not in out]
        return out
    return dict(answer, duplicate_facts=back(answer.get("duplicate_facts"), as_existing),
                contradicted_facts=back(answer.get("contradicted_facts"), as_any))


@dataclass
class _Resolution:
    """The facts of one text that one turn resolves: graphiti resolves a turn's facts
    together, so they all arrive before the question is put, and it is put once."""
    contexts: list[dict] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    answer: asyncio.Future | None = None
    started: bool = False

    async def ask(self, ask_model) -> dict:
        await asyncio.sleep(0)      # the turn's other facts of this text join first
        self.started = True
        shown, self.texts = shown_once(self.contexts)
        return await ask_model(shown)


def install() -> None:
    """Wrap graphiti's per-fact dating call, its entity summaries, its fact-resolution
    prompt and its search for the facts a new one contradicts (idempotent); each applies
    where `active` (or `asked`) is set."""
    global _installed
    if _installed:
        return
    original = edge_operations._extract_edge_timestamps
    summarize = graphiti_module.extract_attributes_from_nodes
    ask = edge_operations.generate_prompt_response
    search = edge_operations.search

    async def dated_by_rule_or_llm(llm_client, edge, episode, **kwargs):
        done = settled.get()
        if done is not None and edge.fact in done:
            return          # the combined route's batch call (or its rule) dated this fact
        reference = edge.reference_time or (episode.valid_at if episode is not None else None)
        if (active.get() and edge.valid_at is None and edge.invalid_at is None and reference is not None
                and is_timeless(edge.fact) and is_timeless(getattr(episode, "content", ""))):
            edge.valid_at = ensure_utc(reference)
            return
        await original(llm_client, edge, episode, **kwargs)

    async def summarized_by_rule_or_llm(clients, nodes, episode=None, previous_episodes=None,
                                        entity_types=None, should_summarize_node=None, edges=None,
                                        **kwargs):
        if active.get() and episode is not None and not isinstance(episode, list):
            linked = {u for e in edges or [] for u in (e.source_node_uuid, e.target_node_uuid)}
            for node in nodes:
                if not node.summary and node.uuid not in linked:
                    # graphiti keeps such a short summary as it is, with no call; "" leaves
                    # the node to its LLM call
                    node.summary = said_about(node.name, episode.content)
        return await summarize(clients, nodes, episode, previous_episodes, entity_types,
                               should_summarize_node, edges, **kwargs)

    async def resolved_once(llm_client, prompt_name, legacy_prompt, context, **kwargs):
        turn = asked.get()
        if prompt_name != RESOLVE_PROMPT or (turn is None and not active.get()):
            return await ask(llm_client, prompt_name, legacy_prompt, context, **kwargs)
        text = context.get("new_edge")
        resolution = (turn or {}).get(text)
        if resolution is None or resolution.started:
            resolution = _Resolution()
            resolution.answer = asyncio.ensure_future(resolution.ask(
                lambda shown: ask(llm_client, prompt_name, legacy_prompt, shown, **kwargs)))
            if turn is not None:
                turn[text] = resolution
        resolution.contexts.append(context)
        answer = await asyncio.shield(resolution.answer)
        return answered_for(answer, resolution.texts, context)

    async def searched_unnamed(clients, query, group_ids, config, search_filter, *args, **kwargs):
        # graphiti's search for invalidation candidates is the only one of resolve_extracted_
        # edges with no filter (its duplicates' search keeps to the fact's two entities)
        if active.get() and search_filter == SearchFilters():
            query = unnamed(query)
        return await search(clients, query, group_ids, config, search_filter, *args, **kwargs)

    edge_operations._extract_edge_timestamps = dated_by_rule_or_llm
    edge_operations.search = searched_unnamed
    graphiti_module.extract_attributes_from_nodes = summarized_by_rule_or_llm
    edge_operations.generate_prompt_response = resolved_once
    _installed = True
