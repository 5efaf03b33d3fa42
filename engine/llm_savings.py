"""LLM calls graphiti makes that a rule answers as well, skipped.

graphiti 0.31.2 dates every new fact with its own LLM call (`extract_edges.extract_timestamps`,
about one call per stored turn, a quarter of all calls). Its prompt says: an ongoing fact is
valid from the reference time; resolve relative expressions from it; leave both null when no
time is stated. A chat turn is its reference time, so when neither the fact nor the turn holds
any time expression or past tense, the answer is known: valid from the turn, no end. Only
then is the call skipped; anything temporal still goes to the LLM.
"""
from __future__ import annotations

import contextvars
import re

from graphiti_core.utils.datetime_utils import ensure_utc
from graphiti_core.utils.maintenance import edge_operations

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


def is_timeless(text: str) -> bool:
    """No date, time word, tense marker or change verb: the fact holds as of when it was said."""
    return not TEMPORAL.search(text or "")


def install() -> None:
    """Wrap graphiti's per-fact dating call (idempotent); it applies where `active` is set."""
    global _installed
    if _installed:
        return
    original = edge_operations._extract_edge_timestamps

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

    edge_operations._extract_edge_timestamps = dated_by_rule_or_llm
    _installed = True
