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
  resolves each against the bank with its own call, and when the facts found are the same the
  prompts are the same, word for word: they are asked once per turn, the answer shared.
  Such a text is also shown once within a prompt (unique_facts): graphiti lists every edge
  among the facts a new one is checked against, and the model cannot tell same-text edges
  apart, so what it answers for the text holds for each of them.
"""
from __future__ import annotations

import asyncio
import contextvars
import copy
import json
import re

from graphiti_core import graphiti as graphiti_module
from graphiti_core.utils.datetime_utils import ensure_utc
from graphiti_core.utils.maintenance import edge_operations
from graphiti_core.utils.text_utils import MAX_SUMMARY_CHARS, truncate_at_sentence

from memoryplus.common.text import split_sentences
from memoryplus.engine.turn_index import split_body

RESOLVE_PROMPT = "dedupe_edges.resolve_edge"

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
# The fact-resolution answers of this call, by prompt context (each asked once, then shared).
asked: contextvars.ContextVar[dict[str, asyncio.Future] | None] = contextvars.ContextVar(
    "memoryplus_resolution_answers", default=None)


def is_timeless(text: str) -> bool:
    """No date, time word, tense marker or change verb: the fact holds as of when it was said."""
    return not TEMPORAL.search(text or "")


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


def unique_facts(context: dict) -> tuple[dict, list[list[int]]]:
    """graphiti's fact-resolution context with each fact text shown once, and, per idx shown,
    the idx values it stands for. A statement the model gave as several facts (one per pair
    of entities) is several edges with one text; graphiti lists each, the model cannot tell
    them apart, and a list of ten candidates often held a text two or three times."""
    groups: dict[str, list[int]] = {}
    lists: tuple[list[str], list[str]] = ([], [])
    for kept, items in zip(lists, (context.get("existing_edges") or [],
                                   context.get("edge_invalidation_candidates") or [])):
        for item in items:
            text = item["fact"]
            if text not in groups:
                groups[text] = []
                kept.append(text)
            groups[text].append(item["idx"])
    existing, candidates = lists
    shown = dict(context,
                 existing_edges=[{"idx": i, "fact": t} for i, t in enumerate(existing)],
                 edge_invalidation_candidates=[{"idx": len(existing) + i, "fact": t}
                                               for i, t in enumerate(candidates)])
    return shown, [groups[t] for t in existing + candidates]


def facts_answered(answer: dict, groups: list[list[int]], existing: int) -> dict:
    """The model's answer to a unique_facts context, in graphiti's idx values: a fact text
    found a duplicate or contradicted stands for every edge with that text (as a duplicate,
    only those of the EXISTING FACTS, the first `existing` idx values). An idx out of range
    stays out of range, for graphiti to report."""
    total = sum(len(g) for g in groups)

    def back(values, limit: int) -> list[int]:
        out: list[int] = []
        for i in values or []:
            mine = groups[i] if 0 <= i < len(groups) else [i if i < 0 else total + i - len(groups)]
            out += [o for o in mine if o not in out and (o >= total or o < 0 or o < limit)]
        return out
    return dict(answer, duplicate_facts=back(answer.get("duplicate_facts"), existing),
                contradicted_facts=back(answer.get("contradicted_facts"), total))


def install() -> None:
    """Wrap graphiti's per-fact dating call, its entity summaries and its fact-resolution
    prompt (idempotent); each applies where `active` (or `asked`) is set."""
    global _installed
    if _installed:
        return
    original = edge_operations._extract_edge_timestamps
    summarize = graphiti_module.extract_attributes_from_nodes
    ask = edge_operations.generate_prompt_response

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
        answers = asked.get()
        if prompt_name != RESOLVE_PROMPT or (answers is None and not active.get()):
            return await ask(llm_client, prompt_name, legacy_prompt, context, **kwargs)
        shown, groups = unique_facts(context)
        if answers is None:
            answer = await ask(llm_client, prompt_name, legacy_prompt, shown, **kwargs)
        else:
            key = json.dumps(shown, sort_keys=True, default=str)
            if key not in answers:
                answers[key] = asyncio.ensure_future(
                    ask(llm_client, prompt_name, legacy_prompt, shown, **kwargs))
            answer = copy.deepcopy(await asyncio.shield(answers[key]))
        return facts_answered(answer, groups, len(context.get("existing_edges") or []))

    edge_operations._extract_edge_timestamps = dated_by_rule_or_llm
    graphiti_module.extract_attributes_from_nodes = summarized_by_rule_or_llm
    edge_operations.generate_prompt_response = resolved_once
    _installed = True
