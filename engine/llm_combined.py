"""One LLM call for a turn's entities and facts: graphiti's own combined extraction inside
graphiti's own `add_episode`.

graphiti 0.31.2's `add_episode` asks the model twice per turn (`extract_nodes.extract_message`,
then `extract_edges.edge`); its combined prompt (`extract_nodes_and_edges.extract_message`,
maintained upstream and the default of its bulk path) yields both in one answer of its
`CombinedExtraction` schema. While `active` holds a `Combined` for the call, `add_episode`'s
node step runs that combined extraction and its edge step takes the facts it found;
everything after them (node and fact resolution, contradictions, summaries, saving) is
graphiti's `add_episode` unchanged.

Two differences from graphiti's combined function, both so that nothing is stored that the
two-call route would not store, nor less:
- an entity the model names but links to no fact is kept (the combined function drops such
  "orphans"; the two-call route keeps them, and our Emotion and Topic tags are such entities);
- the facts' dates (`extract_edges.extract_timestamps_batch`, one call for all of a turn's
  facts) go to the model only for facts that say something about time: a timeless fact in a
  timeless turn is valid from the turn, as that prompt's own rules answer (llm_savings).
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from graphiti_core import graphiti as graphiti_module
from graphiti_core.nodes import EntityNode
from graphiti_core.utils.datetime_utils import utc_now
from graphiti_core.utils.maintenance import combined_extraction
from graphiti_core.utils.maintenance.dedup_helpers import _normalize_string_exact
from graphiti_core.utils.maintenance.graph_data_operations import EPISODE_WINDOW_LEN
from graphiti_core.utils.maintenance.node_operations import (
    _build_entity_types_context, _filter_entity_types_context)

from memoryplus.engine import llm_savings
from memoryplus.engine.llm_savings import is_timeless

COMBINED_PROMPT = "extract_nodes_and_edges.extract_message"
DATES_PROMPT = "extract_edges.extract_timestamps_batch"
# graphiti's combined (bulk) route shows the model this many earlier turns; its two-call
# add_episode shows ten. The combined prompt uses them only to resolve references.
PREVIOUS_TURNS = EPISODE_WINDOW_LEN
# The modes map every fact type from (Entity, Entity) too, so that graphiti's resolution keeps a
# typed fact whose endpoint the model left untyped (modes.py); the prompt shows the typed
# signatures only (one line less per fact type, read on every turn).
ANY = ("Entity", "Entity")


@dataclass
class Combined:
    """What one `add_episode` call needs beyond its own arguments, and what its steps pass on."""
    edge_types: dict | None
    edge_type_map: dict | None
    episode_text: str
    raw: dict[str, Any] | None = None        # the model's combined answer, as parsed
    edges: list = field(default_factory=list)
    dated: set[str] = field(default_factory=set)   # texts of the facts whose dates are settled here


active: contextvars.ContextVar[Combined | None] = contextvars.ContextVar(
    "memoryplus_combined_extraction", default=None)
_installed = False


@contextlib.contextmanager
def scope(edge_types: dict | None, edge_type_map: dict | None, episode_text: str) -> Iterator[Combined]:
    """The combined route (and the dating by rule) for the `add_episode` call inside."""
    install()
    llm_savings.install()
    state = Combined(edge_types=edge_types, edge_type_map=edge_type_map, episode_text=episode_text)
    tokens = (active.set(state), llm_savings.active.set(True), llm_savings.settled.set(state.dated),
              llm_savings.asked.set({}))
    try:
        yield state
    finally:
        llm_savings.asked.reset(tokens[3])
        llm_savings.settled.reset(tokens[2])
        llm_savings.active.reset(tokens[1])
        active.reset(tokens[0])


def install() -> None:
    """Route graphiti's node and edge steps through the combined extraction where `active`
    is set (idempotent; graphiti used directly elsewhere in the process is unchanged)."""
    global _installed
    if _installed:
        return
    nodes_step, edges_step = graphiti_module.extract_nodes, graphiti_module.extract_edges
    ask = combined_extraction.generate_prompt_response

    async def extract_nodes(clients, episode, previous_episodes, entity_types=None,
                            excluded_entity_types=None, custom_extraction_instructions=None):
        state = active.get()
        if state is None:
            return await nodes_step(clients, episode, previous_episodes, entity_types,
                                    excluded_entity_types, custom_extraction_instructions)
        shown = {sig: names for sig, names in (state.edge_type_map or {}).items() if sig != ANY}
        # add_episode read them by uuid, in no order, and hands this same list to its later
        # steps: sorted in place, every prompt shows the conversation as it ran
        previous_episodes.sort(key=said_at)
        nodes, state.edges, index_map = await combined_extraction.extract_nodes_and_edges(
            clients, episode, previous_episodes[-PREVIOUS_TURNS:], entity_types=entity_types,
            excluded_entity_types=excluded_entity_types, edge_type_map=shown or state.edge_type_map,
            edge_types=state.edge_types, custom_extraction_instructions=custom_extraction_instructions)
        _keep_unlinked(state, nodes, index_map, entity_types, excluded_entity_types,
                       episode.group_id)
        return nodes, index_map

    async def extract_edges(clients, episode, nodes, previous_episodes, edge_type_map, group_id="",
                            edge_types=None, strict_edge_types=False, custom_extraction_instructions=None):
        state = active.get()
        if state is None:
            return await edges_step(clients, episode, nodes, previous_episodes, edge_type_map,
                                    group_id, edge_types, strict_edge_types,
                                    custom_extraction_instructions)
        return state.edges, []     # found by the combined call; endpoints are among `nodes`

    async def answer(llm_client, prompt_name, legacy_prompt, context, **kwargs):
        state = active.get()
        if state is None:
            return await ask(llm_client, prompt_name, legacy_prompt, context, **kwargs)
        if prompt_name == DATES_PROMPT:
            return await _dates(state, ask, llm_client, prompt_name, legacy_prompt, context, kwargs)
        result = await ask(llm_client, prompt_name, legacy_prompt, context, **kwargs)
        if prompt_name == COMBINED_PROMPT:
            state.raw = result
        return result

    graphiti_module.extract_nodes = extract_nodes
    graphiti_module.extract_edges = extract_edges
    combined_extraction.generate_prompt_response = answer
    _installed = True


def said_at(episode) -> tuple[float, float]:
    """A turn's place in the conversation: its time, then when it was stored, the order of
    graphiti's own retrieve_episodes ("chronological order"). The read by uuids, which
    add_episode uses for the turns we name, keeps no order; the combined prompt tells the
    model to read these turns "in order"."""
    def seconds(t) -> float:
        return t.timestamp() if t is not None else float("-inf")
    return seconds(episode.valid_at), seconds(episode.created_at)


def _keep_unlinked(state: Combined, nodes: list, index_map: dict, entity_types, excluded, group_id) -> None:
    """Entities of the model's answer that graphiti dropped for having no fact, kept as the
    two-call route keeps them (typed as graphiti types them)."""
    types = _filter_entity_types_context(_build_entity_types_context(entity_types), excluded)
    have = {_normalize_string_exact(n.name) for n in nodes}
    for entity in (state.raw or {}).get("extracted_entities") or []:
        name = str(entity.get("name") or "").strip() if isinstance(entity, dict) else ""
        key = _normalize_string_exact(name)
        if not name or key in have:
            continue
        type_id = entity.get("entity_type_id")
        type_name = (types[type_id].get("entity_type_name")
                     if isinstance(type_id, int) and 0 <= type_id < len(types) else "Entity")
        if excluded and type_name in excluded:
            continue
        node = EntityNode(name=name, group_id=group_id, labels=list({"Entity", str(type_name)}),
                          summary="", created_at=utc_now())
        nodes.append(node)
        index_map[node.uuid] = [0]
        have.add(key)


async def _dates(state: Combined, ask, llm_client, prompt_name, legacy_prompt, context, kwargs) -> dict:
    """The batch dating call for the facts a rule cannot date; the rest valid from the turn."""
    facts = list(context.get("facts") or [])
    timeless_turn = is_timeless(state.episode_text)
    answers: list[dict | None] = [
        {"valid_at": f.get("reference_time"), "invalid_at": None}
        if timeless_turn and is_timeless(f.get("fact", "")) and f.get("reference_time") not in (None, "unknown")
        else None for f in facts]
    asked = [f for f, a in zip(facts, answers) if a is None]
    if asked:     # a failure propagates: graphiti retries the batch, then dates per fact
        result = await ask(llm_client, prompt_name, legacy_prompt, {**context, "facts": asked}, **kwargs)
        got = iter(list((result or {}).get("timestamps") or []))
        answers = [a if a is not None else next(got, {"valid_at": None, "invalid_at": None})
                   for a in answers]
    # settled, whatever the answer: add_episode's per-fact dating call is not made for these
    # again (the edges are not known yet: graphiti dates them before it returns them)
    state.dated.update(str(f.get("fact", "")) for f in facts)
    return {"timestamps": answers}
