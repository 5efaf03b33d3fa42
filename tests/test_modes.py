"""Memory modes: each mode is its own graphiti ontology, valid for graphiti-core 0.31.2."""
from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from graphiti_core.edges import EntityEdge
from graphiti_core.helpers import validate_node_labels
from graphiti_core.nodes import EntityNode, EpisodeType, EpisodicNode
from graphiti_core.utils.maintenance.edge_operations import (
    _edge_types_for_endpoints,
    enforce_edge_type_signatures,
)
from graphiti_core.utils.maintenance.node_operations import extract_nodes
from graphiti_core.utils.ontology_utils.entity_types_utils import validate_entity_types

from memoryplus.config.schema import MEMORY_MODES, Settings
from memoryplus.engine.insight_words import EMOTION_NAMES
from memoryplus.engine.modes import (
    RESERVED_EDGE_NAMES,
    RESERVED_TYPE_NAMES,
    ModeSpec,
    mode_spec,
)

SPECS = {m: mode_spec(m) for m in MEMORY_MODES}


def test_every_mode_of_the_settings_has_a_spec():
    assert tuple(SPECS) == MEMORY_MODES
    for name, spec in SPECS.items():
        assert isinstance(spec, ModeSpec)
        assert spec.name == name


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_types_pass_graphitis_own_validation(mode):
    spec = SPECS[mode]
    assert validate_entity_types(spec.entity_types)
    assert validate_entity_types(spec.edge_types)
    # entity type names become node labels: graphiti checks them before any Cypher
    assert validate_node_labels(list(spec.entity_types))


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_type_models_have_no_fields_and_a_description(mode):
    spec = SPECS[mode]
    for name, model in {**spec.entity_types, **spec.edge_types}.items():
        assert model.model_fields == {}, f"{name} has fields: one more LLM call per node"
        assert model.__doc__ and len(model.__doc__.strip()) > 20, name
        assert model.__name__ == name


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_type_names(mode):
    spec = SPECS[mode]
    for name in spec.entity_types:
        assert name.isidentifier() and name[0].isupper()
        assert name not in RESERVED_TYPE_NAMES            # "Entity" is graphiti's default type
    for name in spec.edge_types:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name), name   # SCREAMING_SNAKE_CASE
        assert name not in RESERVED_EDGE_NAMES
    assert not set(spec.entity_types) & set(spec.edge_types)


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_edge_type_map_is_consistent(mode):
    spec = SPECS[mode]
    known = set(spec.entity_types) | {"Entity"}
    used = set()
    for (source, target), names in spec.edge_type_map.items():
        assert source in known and target in known, (source, target)
        assert names and set(names) <= set(spec.edge_types)
        used |= set(names)
    assert used == set(spec.edge_types)          # every edge type has a signature
    # a correctly named fact survives even when the LLM typed an endpoint as plain Entity
    assert set(spec.edge_type_map[("Entity", "Entity")]) == set(spec.edge_types)


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_cues_are_lowercase_and_cover_the_types(mode):
    spec = SPECS[mode]
    assert set(spec.cues) == set(spec.entity_types)
    for type_name, cues in spec.cues.items():
        assert cues, type_name
        assert all(c == c.lower() and c.strip() == c for c in cues), type_name


def test_the_nine_modes_differ():
    instructions = [s.instructions for s in SPECS.values()]
    assert len(set(instructions)) == 9
    own_ontology = [m for m in MEMORY_MODES if m not in ("MemoryGate", "CustomPrompt")]
    type_sets = {frozenset(SPECS[m].entity_types) for m in own_ontology}
    edge_sets = {frozenset(SPECS[m].edge_types) for m in own_ontology}
    assert len(type_sets) == len(own_ontology) == 7
    assert len(edge_sets) == 7


def test_modes_carry_their_lens():
    def types(mode):
        return set(SPECS[mode].entity_types)

    assert {"Person", "Trait", "Preference", "Place", "Organization"} <= types("Identity")
    assert {"Task", "Goal", "Instruction"} <= types("Assistant")
    assert {"Person", "Place", "Interest", "Thing"} <= types("Chatbot")
    assert {"Project", "Task", "Deadline", "Tool"} <= types("Productivity")
    assert {"Claim", "Source", "Concept", "DataPoint"} <= types("Research")
    assert {"Viewpoint", "Argument", "Opinion"} <= types("Discourse")
    assert {"Person", "Place", "Organization", "Concept"} <= types("ResolveEntities")
    assert "disambiguate" in SPECS["ResolveEntities"].instructions.lower() or \
        "fullest unambiguous name" in SPECS["ResolveEntities"].instructions
    assert "DUE_ON" in SPECS["Productivity"].edge_types
    assert "SUPPORTS" in SPECS["Research"].edge_types


def test_memory_gate_is_chatbot_with_the_gate():
    assert SPECS["MemoryGate"].gate is True
    assert [m for m, s in SPECS.items() if s.gate] == ["MemoryGate"]
    assert SPECS["MemoryGate"].entity_types.keys() == SPECS["Chatbot"].entity_types.keys()
    assert SPECS["MemoryGate"].edge_types.keys() == SPECS["Chatbot"].edge_types.keys()


def test_custom_prompt_carries_the_users_prompt():
    prompt = "Track my houseplants: species, where each one stands and when I watered it."
    spec = mode_spec("CustomPrompt", prompt)
    assert prompt in spec.instructions
    assert spec.entity_types.keys() == SPECS["Chatbot"].entity_types.keys()
    # the prompt is only used in CustomPrompt mode
    assert prompt not in mode_spec("Chatbot", prompt).instructions


@pytest.mark.parametrize("empty", ["", "   \n\t "])
def test_custom_prompt_has_a_clear_default(empty):
    spec = mode_spec("CustomPrompt", empty)
    assert "no custom analysis prompt is set" in spec.instructions.lower()
    assert spec.instructions != SPECS["Chatbot"].instructions


def test_custom_prompt_is_bounded():
    spec = mode_spec("CustomPrompt", "x" * 100_000)
    assert len(spec.instructions) < 12_000


@pytest.mark.parametrize("emotions,topics", [(True, True), (True, False), (False, True),
                                             (False, False)])
@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_tagging_switches_add_and_remove_emotion_and_topic(mode, emotions, topics):
    spec = mode_spec(mode, emotion_tagging=emotions, topic_tagging=topics)
    assert ("Emotion" in spec.entity_types) is emotions
    assert ("Topic" in spec.entity_types) is topics
    assert ("Emotion entities" in spec.instructions) is emotions
    assert ("Topic entities" in spec.instructions) is topics
    assert spec.tagging is (emotions or topics)
    assert validate_entity_types(spec.entity_types)
    base = mode_spec(mode, emotion_tagging=False, topic_tagging=False)
    assert set(spec.entity_types) - set(base.entity_types) == \
        {n for n, on in (("Emotion", emotions), ("Topic", topics)) if on}


def test_emotion_type_honours_the_sensitivity():
    docs = {s: mode_spec("Chatbot", emotion_sensitivity=s).entity_types["Emotion"].__doc__
            for s in ("Low", "Medium", "High")}
    assert len(set(docs.values())) == 3
    assert "strongly and explicitly" in docs["Low"]
    assert "emoji" in docs["High"] and "emoji" not in docs["Low"]
    for doc in docs.values():
        assert all(e in doc for e in EMOTION_NAMES[:5])
    assert mode_spec("Chatbot", emotion_sensitivity="high").emotion_sensitivity == "High"
    # the LLM reads the sensitivity in the Emotion type's description, in the extraction prompt
    assert "mild" in docs["High"] and "mild" not in mode_spec("Chatbot", emotion_sensitivity="High").instructions


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="memory mode"):
        mode_spec("Telepathy")
    with pytest.raises(ValueError, match="sensitivity"):
        mode_spec("Chatbot", emotion_sensitivity="Extreme")
    assert mode_spec("chatbot").name == "Chatbot"
    assert mode_spec("RESOLVEENTITIES").name == "ResolveEntities"


def test_specs_are_rebuilt_per_call_but_types_are_stable():
    a, b = mode_spec("Identity"), mode_spec("Identity")
    assert a.entity_types is not b.entity_types          # callers may not share one dict
    assert a.entity_types["Person"] is b.entity_types["Person"]


def test_settings_defaults_build_a_spec():
    s = Settings()
    spec = mode_spec(s.memory_mode, s.custom_analysis_prompt, emotion_tagging=s.emotion_tagging,
                     topic_tagging=s.topic_tagging, emotion_sensitivity=s.emotion_sensitivity)
    assert spec.name == "Chatbot" and {"Emotion", "Topic"} <= set(spec.entity_types)


def test_graphiti_extraction_uses_the_mode():
    """graphiti's node extraction, with a stand-in LLM: the prompt carries the mode's types
    and instructions, and the nodes come back labelled with the mode's types."""
    spec = mode_spec("Identity")
    seen: dict[str, str] = {}
    ids = ["Entity"] + list(spec.entity_types)

    class FakeLLM:
        async def generate_response(self, messages, **kwargs):
            seen["prompt"] = "\n".join(m.content for m in messages)
            return {"extracted_entities": [
                {"name": "User", "entity_type_id": ids.index("Person")},
                {"name": "Berlin", "entity_type_id": ids.index("Place")},
                {"name": "frustrated", "entity_type_id": ids.index("Emotion")},
                {"name": "linux", "entity_type_id": ids.index("Topic")},
            ]}

    now = datetime.now(timezone.utc)
    episode = EpisodicNode(name="turn", group_id="bank", labels=[], source=EpisodeType.message,
                           content="User: I live in Berlin and linux drives me crazy",
                           source_description="chat", created_at=now, valid_at=now)
    nodes, _ = asyncio.run(extract_nodes(SimpleNamespace(llm_client=FakeLLM()), episode, [],
                                         spec.entity_types, None, spec.instructions))
    labels = {n.name: set(n.labels) - {"Entity"} for n in nodes}
    assert labels == {"User": {"Person"}, "Berlin": {"Place"}, "frustrated": {"Emotion"},
                      "linux": {"Topic"}}
    assert spec.instructions.splitlines()[0] in seen["prompt"]
    assert spec.entity_types["Trait"].__doc__ in seen["prompt"]


def test_graphiti_keeps_a_typed_fact_between_untyped_entities():
    spec = mode_spec("Identity")
    now = datetime.now(timezone.utc)
    user = EntityNode(name="User", group_id="g", labels=["Entity"], created_at=now)
    place = EntityNode(name="Berlin", group_id="g", labels=["Entity"], created_at=now)
    edge = EntityEdge(source_node_uuid=user.uuid, target_node_uuid=place.uuid, name="LIVES_IN",
                      fact="User lives in Berlin", group_id="g", created_at=now,
                      episodes=[])
    types = [_edge_types_for_endpoints(edge, {user.uuid: user, place.uuid: place},
                                       spec.edge_types, spec.edge_type_map)]
    kept, _ = enforce_edge_type_signatures([edge], types, spec.edge_type_map, False)
    assert kept[0].name == "LIVES_IN"
