"""The scripted OpenAI-compatible LLM server: the real openai clients, graphiti's real LLM
clients and a real graphiti + Kuzu pipeline run against it on 127.0.0.1."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

os.environ.setdefault('GRAPHITI_TELEMETRY_ENABLED', 'false')

from graphiti_core.llm_client import LLMConfig, OpenAIClient  # noqa: E402
from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient  # noqa: E402
from graphiti_core.prompts import prompt_library  # noqa: E402
from graphiti_core.prompts.dedupe_edges import EdgeDuplicate  # noqa: E402
from graphiti_core.prompts.dedupe_nodes import NodeDuplicate, NodeResolutions  # noqa: E402
from graphiti_core.prompts.extract_edges import (  # noqa: E402
    BatchEdgeTimestamps,
    EdgeTimestamps,
    ExtractedEdges,
)
from graphiti_core.prompts.extract_nodes import (  # noqa: E402
    EntitySummary,
    ExtractedEntities,
    SummarizedEntities,
)
from graphiti_core.prompts.extract_nodes_and_edges import CombinedExtraction  # noqa: E402
from graphiti_core.prompts.summarize_nodes import Summary, SummaryDescription  # noqa: E402
from graphiti_core.prompts.summarize_sagas import SagaSummary  # noqa: E402
from graphiti_core.utils.maintenance.node_operations import _build_entity_types_context  # noqa: E402

from memoryplus.testing.scripted_llm import (  # noqa: E402
    ScriptedLLMServer,
    embed_text,
    last_user_text,
    mask_secret,
    minimal_instance,
)

REF = datetime(2025, 3, 1, tzinfo=timezone.utc)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def server():
    srv = ScriptedLLMServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def sync_client(srv: ScriptedLLMServer, **kw) -> openai.OpenAI:
    kw.setdefault('max_retries', 0)
    return openai.OpenAI(base_url=srv.base_url, api_key='test-key', **kw)


def async_client(srv: ScriptedLLMServer, **kw) -> openai.AsyncOpenAI:
    kw.setdefault('max_retries', 0)
    return openai.AsyncOpenAI(base_url=srv.base_url, api_key='test-key', **kw)


def llm_config(srv: ScriptedLLMServer) -> LLMConfig:
    return LLMConfig(api_key='test-key', base_url=srv.base_url, model='scripted', small_model='scripted')


def scripted_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith('scripted-llm')]


# ------------------------------------------------------------------- server lifecycle


def test_lifecycle_base_url_and_no_leftover_threads():
    before = len(scripted_threads())
    with ScriptedLLMServer() as srv:
        assert re.fullmatch(r'http://127\.0\.0\.1:\d+/v1', srv.base_url)
        port = srv.port
        client = sync_client(srv)
        # a keep-alive connection stays open in the client's pool while we stop
        assert [m.id for m in client.models.list()] == ['scripted-llm']
        assert len(scripted_threads()) > before
    assert len(scripted_threads()) == before
    with pytest.raises(OSError):
        socket.create_connection(('127.0.0.1', port), timeout=0.5)
    srv.stop()  # idempotent


def test_stop_interrupts_a_held_connection():
    srv = ScriptedLLMServer().start()
    srv.timeout_hold_s = 30
    srv.inject('timeout')
    errors: list[BaseException] = []

    def call():
        try:
            sync_client(srv, timeout=60).chat.completions.create(
                model='m', messages=[{'role': 'user', 'content': 'hi'}])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.3)
    start = time.monotonic()
    srv.stop()
    t.join(5)
    assert time.monotonic() - start < 3
    assert not t.is_alive()
    assert errors and isinstance(errors[0], openai.APIConnectionError)
    assert scripted_threads() == []


# ------------------------------------------------------------- the real openai clients


def test_chat_completion_echoes_last_user_message_and_records(server):
    client = sync_client(server)
    r = client.chat.completions.create(
        model='any-model',
        messages=[{'role': 'system', 'content': 'You are helpful.'},
                  {'role': 'user', 'content': 'Where do I live? I live in Berlin.'}],
    )
    text = r.choices[0].message.content
    assert 'I live in Berlin' in text
    assert r.model == 'any-model' and r.choices[0].finish_reason == 'stop'
    assert r.usage.prompt_tokens > 0
    path, body = server.requests[-1]
    assert path == '/v1/chat/completions' and body['messages'][1]['content'].startswith('Where')
    assert server.calls['chat'] == 1
    prompt_chars = len('You are helpful.') + len('Where do I live? I live in Berlin.') + 2
    assert server.input_tokens == prompt_chars // 4


def test_chat_reply_callback_and_streaming():
    seen: list[dict] = []

    def reply(body: dict) -> str:
        seen.append(body)
        return 'Paris, as you told me. ' * 3

    with ScriptedLLMServer(chat_reply=reply) as srv:
        client = sync_client(srv)
        stream = client.chat.completions.create(
            model='m', messages=[{'role': 'user', 'content': 'Where do I live?'}],
            stream=True, stream_options={'include_usage': True})
        chunks = list(stream)
        text = ''.join(c.choices[0].delta.content or '' for c in chunks if c.choices)
        assert text == 'Paris, as you told me. ' * 3
        assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
        assert last_user_text(seen[0]) == 'Where do I live?'


@pytest.mark.asyncio
async def test_async_chat_and_async_stream(server):
    client = async_client(server)
    r = await client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'async hello'}])
    assert 'async hello' in r.choices[0].message.content
    stream = await client.chat.completions.create(
        model='m', messages=[{'role': 'user', 'content': 'async stream'}], stream=True)
    parts = [c.choices[0].delta.content or '' async for c in stream if c.choices]
    assert 'async stream' in ''.join(parts)
    r2 = await client.responses.create(model='m', input='async responses')
    assert 'async responses' in r2.output_text
    await client.close()


def test_responses_plain_and_streamed_like_pygpt(server):
    client = sync_client(server)
    r = client.responses.create(model='gpt-x', input='Tell me about Berlin', instructions='Be brief.')
    assert 'Tell me about Berlin' in r.output_text
    assert r.status == 'completed' and r.usage.input_tokens > 0

    # PyGPT's chat mode: streamed Responses request, system prompt in `instructions`,
    # input as a list of messages with input_text parts
    stream = client.responses.create(
        model='gpt-x', instructions='You are PyGPT.', stream=True,
        input=[{'role': 'user', 'content': [{'type': 'input_text', 'text': 'Hi, I am Ada'}]}])
    events = list(stream)
    types = [e.type for e in events]
    assert types[0] == 'response.created' and types[-1] == 'response.completed'
    assert 'response.output_item.added' in types and 'response.output_item.done' in types
    deltas = ''.join(e.delta for e in events if e.type == 'response.output_text.delta')
    assert 'Hi, I am Ada' in deltas
    assert events[-1].response.output_text == deltas
    assert server.requests[-1][1]['instructions'] == 'You are PyGPT.'

    with client.responses.stream(model='gpt-x', input='helper stream') as s:
        final = s.get_final_response()
    assert 'helper stream' in final.output_text


def test_embeddings_deterministic_normalised_and_dimensioned(server):
    client = sync_client(server)
    texts = ['User lives in Berlin', 'User lives in Paris', 'Quantum chromodynamics lecture']
    r = client.embeddings.create(model='text-embedding-3-small', input=texts)  # base64 on the wire
    vecs = [d.embedding for d in r.data]
    assert [len(v) for v in vecs] == [384] * 3
    assert all(abs(math.fsum(x * x for x in v) - 1) < 1e-5 for v in vecs)
    assert server.requests[-1][1]['encoding_format'] == 'base64'

    def cos(a, b):
        return math.fsum(x * y for x, y in zip(a, b))

    assert cos(vecs[0], vecs[1]) > cos(vecs[0], vecs[2]) + 0.3
    again = client.embeddings.create(model='e', input=texts[0], encoding_format='float').data[0].embedding
    assert max(abs(a - b) for a, b in zip(again, vecs[0])) < 1e-6  # same vector in float and base64
    assert max(abs(a - b) for a, b in zip(embed_text(texts[0]), vecs[0])) < 1e-6
    small = client.embeddings.create(model='e', input=['a', 'b'], dimensions=64)
    assert [len(d.embedding) for d in small.data] == [64, 64]
    assert server.calls['embeddings'] == 3


# ------------------------------------------- graphiti's LLM clients, every pipeline model


class Person(BaseModel):
    """A human person, such as a friend, relative, doctor or colleague."""

    occupation: str | None = Field(None, description='Job title')


class Location(BaseModel):
    """A physical place where someone lives or travels: a city, country or address."""


class WorksAt(BaseModel):
    """Employment: a person works at a company."""

    role: str | None = None


ENTITY_TYPES = _build_entity_types_context({'Person': Person, 'Location': Location})
TYPE_ID = {t['entity_type_name']: t['entity_type_id'] for t in ENTITY_TYPES}


def _episodes_ctx(content: str) -> dict:
    return {'episode_content': content, 'previous_episodes': [], 'custom_extraction_instructions': '',
            'entity_types': ENTITY_TYPES, 'episode_timestamp': REF.isoformat(), 'source_description': 'chat'}


def case_extracted_entities():
    msgs = prompt_library.extract_nodes.extract_message(_episodes_ctx('User: I live in Berlin with my cat'))

    def check(r: ExtractedEntities):
        got = {e.name: e.entity_type_id for e in r.extracted_entities}
        assert got == {'User': TYPE_ID['Person'], 'Berlin': TYPE_ID['Location']}

    return msgs, ExtractedEntities, check


def case_node_resolutions():
    msgs = prompt_library.dedupe_nodes.nodes({
        'extracted_nodes': [{'id': 0, 'name': 'berlin', 'entity_type': ['Location'], 'entity_type_description': ''},
                            {'id': 1, 'name': 'Paris', 'entity_type': ['Location'], 'entity_type_description': ''}],
        'existing_nodes': [{'candidate_id': 0, 'name': 'Berlin', 'entity_types': ['Location'], 'summary': ''},
                           {'candidate_id': 1, 'name': 'Bern', 'entity_types': ['Location'], 'summary': ''}],
        'episode_content': 'User: berlin or Paris?', 'previous_episodes': []})

    def check(r: NodeResolutions):
        assert [(x.id, x.duplicate_candidate_id) for x in r.entity_resolutions] == [(0, 0), (1, -1)]

    return msgs, NodeResolutions, check


def case_node_duplicate():
    msgs = prompt_library.dedupe_nodes.node({
        'previous_episodes': [], 'episode_content': '', 'extracted_node': {'id': 0, 'name': 'Dr. Okafor'},
        'entity_type_description': '', 'existing_nodes': [{'candidate_id': 0, 'name': 'Ada'},
                                                          {'candidate_id': 1, 'name': 'dr. okafor'}]})

    def check(r: NodeDuplicate):
        assert r.duplicate_candidate_id == 1

    return msgs, NodeDuplicate, check


def case_extracted_edges():
    msgs = prompt_library.extract_edges.edge({
        'episode_content': 'User: I moved last year. I live in Berlin and work at Acme Corp.',
        'nodes': [{'name': 'User', 'entity_types': ['Entity', 'Person']},
                  {'name': 'Berlin', 'entity_types': ['Entity', 'Location']},
                  {'name': 'Acme Corp', 'entity_types': ['Entity']}],
        'previous_episodes': [], 'reference_time': REF, 'edge_types': [], 'strict_edge_types': False,
        'custom_extraction_instructions': ''})

    def check(r: ExtractedEdges):
        triples = {(e.source_entity_name, e.relation_type, e.target_entity_name) for e in r.edges}
        assert triples == {('User', 'LIVES_IN', 'Berlin'), ('User', 'WORKS_AT', 'Acme Corp')}
        assert all(e.fact == 'User lives in Berlin and works at Acme Corp.' for e in r.edges)

    return msgs, ExtractedEdges, check


def case_extracted_edges_with_fact_types():
    msgs = prompt_library.extract_edges.edge({
        'episode_content': 'User: I work at Acme Corp.',
        'nodes': [{'name': 'User', 'entity_types': ['Entity']}, {'name': 'Acme Corp', 'entity_types': ['Entity']}],
        'previous_episodes': [], 'reference_time': REF, 'strict_edge_types': False, 'custom_extraction_instructions': '',
        'edge_types': [{'fact_type_name': 'WorksAt', 'fact_type_signatures': [('Entity', 'Entity')],
                        'fact_type_description': WorksAt.__doc__}]})

    def check(r: ExtractedEdges):
        assert [(e.source_entity_name, e.relation_type, e.target_entity_name) for e in r.edges] == [
            ('User', 'WorksAt', 'Acme Corp')]

    return msgs, ExtractedEdges, check


def case_edge_duplicate():
    msgs = prompt_library.dedupe_edges.resolve_edge({
        'existing_edges': [{'idx': 0, 'fact': 'User lives in Berlin'}, {'idx': 1, 'fact': 'User works at Acme'}],
        'edge_invalidation_candidates': [{'idx': 2, 'fact': 'User lives in Rome'}, {'idx': 3, 'fact': 'User lives in Paris'}],
        'new_edge': 'User lives in Paris'})

    def check(r: EdgeDuplicate):
        assert r.duplicate_facts == [] and r.contradicted_facts == [0, 2]

    return msgs, EdgeDuplicate, check


def case_edge_duplicate_same_text():
    msgs = prompt_library.dedupe_edges.resolve_edge({
        'existing_edges': [{'idx': 0, 'fact': 'User works at Acme'}, {'idx': 1, 'fact': 'user lives  in Berlin.'}],
        'edge_invalidation_candidates': [], 'new_edge': 'User lives in Berlin'})

    def check(r: EdgeDuplicate):
        assert r.duplicate_facts == [1] and r.contradicted_facts == []

    return msgs, EdgeDuplicate, check


def case_edge_duplicate_negation():
    msgs = prompt_library.dedupe_edges.resolve_edge({
        'existing_edges': [{'idx': 0, 'fact': 'User lives in Berlin'}],
        'edge_invalidation_candidates': [{'idx': 1, 'fact': 'User likes Jazz'}, {'idx': 2, 'fact': 'User works at IBM'}],
        'new_edge': "User doesn't live in Berlin anymore and used to work at IBM"})

    def check(r: EdgeDuplicate):
        assert r.duplicate_facts == [] and r.contradicted_facts == [0, 2]

    return msgs, EdgeDuplicate, check


def case_edge_timestamps():
    msgs = prompt_library.extract_edges.extract_timestamps({'fact': 'User lives in Paris',
                                                            'reference_time': REF.isoformat()})

    def check(r: EdgeTimestamps):
        assert r.valid_at == '2025-03-01T00:00:00Z' and r.invalid_at is None

    return msgs, EdgeTimestamps, check


def case_batch_edge_timestamps():
    msgs = prompt_library.extract_edges.extract_timestamps_batch({'facts': [
        {'fact': 'User lives in Paris', 'reference_time': REF.isoformat()},
        {'fact': 'User used to live in Rome', 'reference_time': REF.isoformat()}]})

    def check(r: BatchEdgeTimestamps):
        assert [(t.valid_at, t.invalid_at) for t in r.timestamps] == [
            ('2025-03-01T00:00:00Z', None), (None, '2025-03-01T00:00:00Z')]

    return msgs, BatchEdgeTimestamps, check


def case_summarized_entities():
    msgs = prompt_library.extract_nodes.extract_summaries_batch({
        'entities': [{'name': 'User', 'summary': 'User likes tea.', 'entity_types': ['Entity'], 'attributes': {}},
                     {'name': 'Berlin', 'summary': '', 'entity_types': ['Location'], 'attributes': {}},
                     {'name': 'Tokyo', 'summary': '', 'entity_types': ['Location'], 'attributes': {}}],
        'episode_content': 'User: I live in Berlin. The weather is grey.',
        'previous_episodes': [{'content': 'User: My sister works in Berlin', 'timestamp': None}],
        'entity_type_descriptions': {}})

    def check(r: SummarizedEntities):
        got = {s.name: s.summary for s in r.summaries}
        assert set(got) == {'User', 'Berlin'}  # nothing to say about Tokyo
        assert got['User'].startswith('User likes tea.') and 'User lives in Berlin.' in got['User']
        assert "User's sister works in Berlin." in got['Berlin']

    return msgs, SummarizedEntities, check


def case_summaries_from_episodes():
    msgs = prompt_library.extract_nodes.extract_entity_summaries_from_episodes({
        'entities': [{'name': 'User', 'summary': '', 'entity_types': ['Entity'], 'attributes': {}}],
        'episode_content': 'User: I work at Acme Corp.', 'previous_episodes': [], 'entity_type_descriptions': {}})

    def check(r: SummarizedEntities):
        assert [(s.name, s.summary) for s in r.summaries] == [('User', 'User works at Acme Corp.')]

    return msgs, SummarizedEntities, check


def case_combined_extraction():
    content = ('[Episode 0] (timestamp: 2025-03-01T00:00:00+00:00)\nUser: I live in Berlin\n\n'
               '[Episode 1] (timestamp: 2025-03-02T00:00:00+00:00)\nUser: I work at Acme Corp')
    ctx = _episodes_ctx(content) | {'edge_types': [], 'strict_edge_types': False}
    msgs = prompt_library.extract_nodes_and_edges.extract_message(ctx)

    def check(r: CombinedExtraction):
        assert [e.name for e in r.extracted_entities] == ['User', 'Berlin', 'Acme Corp']
        assert {(e.relation_type, e.target_entity_name, tuple(e.episode_indices)) for e in r.edges} == {
            ('LIVES_IN', 'Berlin', (0,)), ('WORKS_AT', 'Acme Corp', (1,))}

    return msgs, CombinedExtraction, check


def case_summary_pair():
    msgs = prompt_library.summarize_nodes.summarize_pair(
        {'node_summaries': ['User lives in Berlin.', 'User works at Acme.']})

    def check(r: Summary):
        assert 'Berlin' in r.summary and 'Acme' in r.summary

    return msgs, Summary, check


def case_summary_description():
    msgs = prompt_library.summarize_nodes.summary_description({'summary': 'User lives in Berlin.'})

    def check(r: SummaryDescription):
        assert 'Berlin' in r.description

    return msgs, SummaryDescription, check


def case_saga_summary():
    msgs = prompt_library.summarize_sagas.summarize_saga(
        {'saga_name': 'moving', 'existing_summary': '', 'episodes': ['User: I live in Berlin']})

    def check(r: SagaSummary):
        assert r.summary == 'User lives in Berlin'

    return msgs, SagaSummary, check


def case_entity_summary():
    msgs = prompt_library.extract_nodes.extract_summary({
        'previous_episodes': [], 'episode_content': 'User: I live in Berlin',
        'node': {'name': 'Berlin', 'summary': ''}})

    def check(r: EntitySummary):
        assert r.summary == 'User lives in Berlin.'

    return msgs, EntitySummary, check


def case_entity_attributes():
    msgs = prompt_library.extract_nodes.extract_attributes({
        'previous_episodes': [], 'episode_content': 'User: I am a nurse', 'node': {'name': 'User', 'occupation': None}})

    def check(r: Person):
        assert r.occupation is None

    return msgs, Person, check


def case_edge_attributes():
    msgs = prompt_library.extract_edges.extract_attributes(
        {'fact': 'User works at Acme', 'reference_time': REF, 'existing_attributes': {}})

    def check(r: WorksAt):
        assert r.role is None

    return msgs, WorksAt, check


class Mood(str, Enum):
    happy = 'happy'
    sad = 'sad'


class Inner(BaseModel):
    label: str
    weight: float = Field(ge=0.5)


class Weird(BaseModel):
    """Not a graphiti model: the server must build a minimal valid instance."""

    title: str = Field(min_length=3)
    when: datetime
    mood: Mood
    kind: Literal['a', 'b']
    count: int = Field(gt=2)
    flag: bool
    inner: Inner
    tags: list[str] = Field(min_length=2)
    maybe: Inner | None
    extra: dict[str, int]


def case_unknown_schema():
    from graphiti_core.prompts.models import Message

    msgs = [Message(role='system', content='You answer in JSON.'), Message(role='user', content='Anything.')]

    def check(r: Weird):
        assert r.count == 3 and len(r.tags) == 2 and r.inner.weight == 0.5 and r.maybe is None

    return msgs, Weird, check


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith('case_')}


@pytest.mark.asyncio
@pytest.mark.parametrize('client_kind', ['OpenAIClient', 'OpenAIGenericClient'])
@pytest.mark.parametrize('case', sorted(CASES))
async def test_graphiti_clients_answer_every_pipeline_model(server, client_kind, case):
    messages, model, check = CASES[case]()
    if client_kind == 'OpenAIClient':
        llm = OpenAIClient(llm_config(server))  # structured output via client.responses.parse
        endpoint = '/v1/responses'
    else:
        llm = OpenAIGenericClient(llm_config(server), structured_output_mode='json_schema')
        endpoint = '/v1/chat/completions'
    result = await llm.generate_response(messages, response_model=model,
                                         attribute_extraction=case.endswith('attributes'))
    check(model.model_validate(result))
    assert server.calls[model.__name__] == 1
    path, body = server.requests[-1]
    assert path == endpoint
    if client_kind == 'OpenAIClient':
        assert body['text']['format']['name'] == model.__name__ and body['text']['format']['strict'] is True
    else:
        assert body['response_format']['json_schema']['name'] == model.__name__
    assert server.brain_errors == []
    await llm.client.close()


@pytest.mark.asyncio
async def test_generic_client_json_object_mode_finds_schema_in_prompt(server):
    llm = OpenAIGenericClient(llm_config(server), structured_output_mode='json_object')
    messages, model, check = case_extracted_edges()
    result = await llm.generate_response(messages, response_model=model)
    check(model.model_validate(result))
    assert server.requests[-1][1]['response_format'] == {'type': 'json_object'}
    assert server.calls['ExtractedEdges'] == 1
    await llm.client.close()


@pytest.mark.asyncio
async def test_entity_type_lists_change_the_labels(server):
    """Different memory modes (entity-type lists) give different labels for one message."""

    class Place(BaseModel):
        """A geographic location or city."""

    class Hobby(BaseModel):
        """A pastime or activity, like chess or cycling."""

    llm = OpenAIGenericClient(llm_config(server))
    labels = []
    for types in ({'Place': Place}, {'Hobby': Hobby}, None):
        ctx = _episodes_ctx('User: I live in Berlin and play Chess with Magnus.')
        ctx['entity_types'] = _build_entity_types_context(types)
        names = {t['entity_type_id']: t['entity_type_name'] for t in ctx['entity_types']}
        r = ExtractedEntities.model_validate(await llm.generate_response(
            prompt_library.extract_nodes.extract_message(ctx), response_model=ExtractedEntities))
        labels.append({e.name: names[e.entity_type_id] for e in r.extracted_entities})
    assert labels[0]['Berlin'] == 'Place' and labels[0]['Chess'] == 'Entity'
    assert labels[1]['Chess'] == 'Hobby' and labels[1]['Berlin'] == 'Entity'
    assert set(labels[2].values()) == {'Entity'}
    assert set(labels[2]) == {'User', 'Berlin', 'Chess', 'Magnus'}
    await llm.client.close()


def test_minimal_instance_of_a_json_schema():
    assert Weird.model_validate(minimal_instance(Weird.model_json_schema()))
    assert minimal_instance({'type': 'object', 'properties': {'a': {'type': 'array'}}, 'required': ['a']}) == {'a': []}


@pytest.mark.asyncio
async def test_reranker_logprobs_path(server):
    from graphiti_core.cross_encoder.openai_reranker_client import OpenAIRerankerClient

    client = async_client(server)
    rr = OpenAIRerankerClient(config=llm_config(server), client=client)
    ranked = await rr.rank('where does the user live', ['The weather is grey', 'User lives in Berlin'])
    assert ranked[0][0] == 'User lives in Berlin' and ranked[0][1] > 0.5 > ranked[1][1]
    assert server.calls['rerank'] == 2
    await client.close()


# ------------------------------------------------------------------ graphiti + Kuzu


@pytest.mark.asyncio
async def test_graphiti_on_kuzu_learns_and_invalidates_a_fact(server, tmp_path):
    from graphiti_core import Graphiti
    from graphiti_core.cross_encoder.client import CrossEncoderClient
    from graphiti_core.driver.driver import GraphProvider
    from graphiti_core.driver.kuzu_driver import KuzuDriver
    from graphiti_core.edges import EntityEdge
    from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig
    from graphiti_core.graph_queries import get_fulltext_indices
    from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF
    from graphiti_core.search.search_filters import ComparisonOperator, DateFilter, SearchFilters

    class OverlapCrossEncoder(CrossEncoderClient):
        async def rank(self, query, passages):
            q = set(query.lower().split())
            return sorted(((p, len(q & set(p.lower().split())) / (len(q) or 1)) for p in passages),
                          key=lambda x: -x[1])

    driver = KuzuDriver(db=str(tmp_path / 'g.kuzu'))
    driver._database = ''  # workaround 1: add_episode(group_id=...) needs it
    for query in get_fulltext_indices(GraphProvider.KUZU):  # workaround 2, idempotent
        try:
            await driver.execute_query(query)
        except Exception as exc:  # noqa: BLE001
            if 'already exists' not in str(exc):
                raise
    graphiti = Graphiti(
        graph_driver=driver,
        llm_client=OpenAIClient(llm_config(server)),
        embedder=OpenAIEmbedder(OpenAIEmbedderConfig(api_key='test-key', base_url=server.base_url, embedding_dim=384)),
        cross_encoder=OverlapCrossEncoder(),
    )
    try:
        t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
        turns = ['User: I live in Berlin', 'User: My dentist is Dr. Okafor.', 'User: I moved, I live in Paris now']
        results = []
        for i, body in enumerate(turns):
            results.append(await graphiti.add_episode(
                name=f'turn {i}', episode_body=body, source_description='chat',
                reference_time=t0 + timedelta(days=i), group_id='preset_a'))

        assert {n.name for n in results[0].nodes} == {'User', 'Berlin'}
        assert [(e.name, e.fact) for e in results[0].edges] == [('LIVES_IN', 'User lives in Berlin')]
        assert {n.name for n in results[1].nodes} == {'User', 'Dr. Okafor'}
        assert [e.name for e in results[1].edges] == ['HAS_DENTIST']

        edges = await EntityEdge.get_by_group_ids(driver, ['preset_a'])
        lives = {('Berlin' if 'Berlin' in e.fact else 'Paris'): e for e in edges if e.name == 'LIVES_IN'}
        assert set(lives) == {'Berlin', 'Paris'}
        def utc(dt):  # Kuzu hands back naive UTC datetimes
            return dt.replace(tzinfo=timezone.utc) if dt is not None and dt.tzinfo is None else dt

        assert utc(lives['Berlin'].valid_at) == t0
        assert utc(lives['Berlin'].invalid_at) == t0 + timedelta(days=2)  # ended when the Paris turn began
        assert lives['Berlin'].expired_at is not None
        assert utc(lives['Paris'].valid_at) == t0 + timedelta(days=2)
        assert lives['Paris'].invalid_at is None and lives['Paris'].expired_at is None

        current = SearchFilters(expired_at=[[DateFilter(comparison_operator=ComparisonOperator.is_null)]])
        found = await graphiti.search_('User lives in', config=EDGE_HYBRID_SEARCH_RRF.model_copy(deep=True),
                                       group_ids=['preset_a'], search_filter=current)
        facts = [e.fact for e in found.edges]
        assert any('Paris' in f for f in facts) and not any('Berlin' in f for f in facts)

        calls = server.calls
        assert calls['ExtractedEntities'] == 3 and calls['ExtractedEdges'] == 3
        assert calls['EdgeDuplicate'] >= 1 and calls['EdgeTimestamps'] >= 3
        assert calls['embeddings'] >= 3
        assert server.brain_errors == []
    finally:
        driver.client.close()
        driver.db.close()


# ----------------------------------------------------------------------------- faults


def test_fault_429_has_retry_after_then_recovers(server):
    client = sync_client(server)
    server.inject('429', retry_after=7)
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}])
    assert info.value.status_code == 429
    assert info.value.response.headers['retry-after'] == '7'
    assert server.faults_pending == []
    ok = client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}])
    assert 'hi' in ok.choices[0].message.content
    assert server.faults_applied['429'] == 1


def test_openai_client_retries_429_itself_honouring_retry_after(server):
    client = sync_client(server, max_retries=2)
    server.inject('429', count=2, retry_after=0.1)
    r = client.responses.create(model='m', input='retry me')
    assert 'retry me' in r.output_text
    assert server.calls['chat'] == 3  # two 429s + the answer, all from one call


@pytest.mark.asyncio
async def test_graphiti_maps_429_to_its_rate_limit_error(server):
    from graphiti_core.llm_client.errors import RateLimitError

    llm = OpenAIClient(llm_config(server), client=async_client(server))
    server.inject('429', structured_only=True)
    messages, model, _check = case_edge_timestamps()
    with pytest.raises(RateLimitError):
        await llm.generate_response(messages, response_model=model)
    assert server.calls['EdgeTimestamps'] == 1  # graphiti does not retry rate limits itself
    await llm.client.close()


def test_fault_500_and_timeout(server):
    client = sync_client(server, timeout=0.4)
    server.inject('500')
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model='m', input='x')
    server.timeout_hold_s = 1.5
    server.inject('timeout')
    start = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'slow'}])
    assert time.monotonic() - start < 1.2
    assert 'fine' in client.chat.completions.create(
        model='m', messages=[{'role': 'user', 'content': 'fine'}]).choices[0].message.content


@pytest.mark.asyncio
async def test_fault_garbage_breaks_graphiti_parsing(server):
    # OpenAIClient: responses.parse fails validation; graphiti re-asks twice, then raises
    llm = OpenAIClient(llm_config(server))
    server.inject('garbage', count=3)
    messages, model, _check = case_extracted_entities()
    with pytest.raises(Exception) as info:
        await llm.generate_response(messages, response_model=model)
    assert 'json' in str(info.value).lower()
    assert server.calls['ExtractedEntities'] == 3
    retried = server.requests[-1][1]['input'][-1]['content']
    assert 'The previous response attempt was invalid' in retried

    # OpenAIGenericClient: its JSON parse fails (one attempt, without the tenacity backoff)
    generic = OpenAIGenericClient(llm_config(server))
    server.inject('garbage')
    messages, model, _check = case_extracted_entities()
    with pytest.raises(json.JSONDecodeError):
        await generic._generate_response(messages, response_model=model)
    await llm.client.close()
    await generic.client.close()


def test_fault_think_prefix_is_recoverable(server):
    client = sync_client(server)
    messages, model, check = case_edge_timestamps()
    server.inject('think')
    r = client.chat.completions.create(
        model='m', messages=[{'role': m.role, 'content': m.content} for m in messages],
        response_format={'type': 'json_schema', 'json_schema': {'name': model.__name__,
                                                                'schema': model.model_json_schema()}})
    raw = r.choices[0].message.content
    assert raw.startswith('<think>') and '</think>' in raw
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    check(model.model_validate_json(re.sub(r'(?s)^\s*<think>.*?</think>\s*', '', raw)))


def test_faults_and_latency_skip_embeddings_unless_asked(server):
    client = sync_client(server)
    server.inject('500')
    client.embeddings.create(model='e', input='still fine')
    assert server.faults_pending == [('500', 1)]
    server.clear_faults()

    server.inject('500', embeddings=True, llm=False)
    client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'chat is fine'}])
    with pytest.raises(openai.InternalServerError):
        client.embeddings.create(model='e', input='now it fails')

    server.inject('garbage', embeddings=True, llm=False)
    with pytest.raises((openai.APIResponseValidationError, json.JSONDecodeError, ValueError)):
        client.embeddings.create(model='e', input='truncated body')

    server.latency_s = 0.3
    start = time.monotonic()
    client.embeddings.create(model='e', input='fast')
    assert time.monotonic() - start < 0.25
    start = time.monotonic()
    client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'slow'}])
    assert time.monotonic() - start >= 0.3


def test_structured_only_faults_skip_plain_chat(server):
    client = sync_client(server)
    server.inject('500', structured_only=True)
    client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'plain'}])
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': '{}'}],
                                       response_format={'type': 'json_object'})
    with pytest.raises(ValueError):
        server.inject('503')


def test_concurrent_requests_are_served_in_parallel_and_all_recorded(server):
    client = sync_client(server)
    server.latency_s = 0.4
    n = 8

    def call(i):
        client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': f'msg {i}'}])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - start < 0.4 * n / 2  # serially it would take 3.2 s
    assert server.calls['chat'] == n
    assert sorted(b['messages'][0]['content'] for _p, b in server.requests) == sorted(f'msg {i}' for i in range(n))


# -------------------------------------------------------------------------------- CLI


def test_standalone_cli_runs_until_ctrl_c():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, '-m', 'memoryplus.testing.scripted_llm', '--port', str(port), '--latency-ms', '20'],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # Ctrl-C as in a terminal: an ignored SIGINT some earlier code of this process left
        # behind would be inherited, and Python then installs no KeyboardInterrupt handler
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()
        assert f'http://127.0.0.1:{port}/v1' in line
        with urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/models', timeout=5) as resp:
            assert json.load(resp)['data'][0]['id'] == 'scripted-llm'
        req = urllib.request.Request(
            f'http://127.0.0.1:{port}/v1/chat/completions', method='POST',
            data=json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'cli'}]}).encode(),
            headers={'Content-Type': 'application/json'})
        start = time.monotonic()
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert 'cli' in json.load(resp)['choices'][0]['message']['content']
        assert time.monotonic() - start >= 0.02
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "stopped; 1 calls: {'chat': 1}" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------- MemoryPlus's own call: the memory gate


async def test_memory_gate_is_answered_by_the_turn_it_is_asked_about(server):
    """The gate's decision comes from what the turn says, both ways, through graphiti's real
    client as the worker calls it; a retry after a broken answer still judges the turn."""
    from memoryplus.engine.llm_calls import MemoryGateDecision, gate_with_llm
    from memoryplus.config.schema import Settings
    from memoryplus.engine.providers import LLMUsage
    from memoryplus.wire.records import Credentials
    settings = Settings(llm_provider='openai', override_base_url=server.base_url,
                        override_api_key='sk-gate-aaaaaaaaaaaaaaaa', insight_model='scripted-llm')
    creds = Credentials()
    kept = ['User: I met Dr Okafor about the Apollo review today.\nAssistant: Noted.',
            'User: Note: the Falcon kickoff moved to Thursday.\nAssistant: Noted.']
    skipped = ['User: Quick question: how long should an egg boil?\nAssistant: About nine minutes.',
               'User: Thanks, that helps!\nAssistant: Glad to help, Anna.']
    for body in kept:
        keep, reason = await gate_with_llm(settings, creds, LLMUsage(), body)
        assert keep is True and reason, body
    for body in skipped:
        keep, reason = await gate_with_llm(settings, creds, LLMUsage(), body)
        assert keep is False and reason, body
    server.inject('garbage', count=1, structured_only=True)   # graphiti re-asks with an error note
    keep, _ = await gate_with_llm(settings, creds, LLMUsage(), skipped[0])
    assert keep is False
    assert server.calls['MemoryGateDecision'] == 4 + 2
    assert server.brain.gate_decisions == {True: 2, False: 4}
    assert server.unanswered == {}, 'the gate was answered with a made-up instance'
    assert set(MemoryGateDecision.model_json_schema()['properties']) == {'remember', 'reason'}


def test_a_schema_nobody_answers_is_counted(server):
    class Unknown(BaseModel):
        flag: bool
    client = sync_client(server)
    client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'x'}],
                                   response_format={'type': 'json_schema', 'json_schema': {
                                       'name': 'Unknown', 'schema': Unknown.model_json_schema()}})
    assert server.unanswered == {'Unknown': 1}


def test_the_api_key_of_each_request_is_recorded_masked(server):
    chat_key, embed_key = 'sk-chat-1111111111111111', 'sk-embed-2222222222222222'
    openai.OpenAI(base_url=server.base_url, api_key=chat_key, max_retries=0).chat.completions.create(
        model='m', messages=[{'role': 'user', 'content': 'hello'}])
    openai.OpenAI(base_url=server.base_url, api_key=embed_key, max_retries=0).embeddings.create(
        model='e', input=['hello'])
    assert server.keys_sent_to('/chat/completions') == {mask_secret(chat_key)}
    assert server.keys_sent_to('/embeddings') == {mask_secret(embed_key)}
    recorded = json.dumps(server.api_keys) + json.dumps(server.requests)
    assert chat_key not in recorded and embed_key not in recorded, 'a key was kept in the clear'
    assert mask_secret(chat_key) != mask_secret(embed_key)


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_reply_of_tool_calls_is_a_function_call_in_both_apis(stream):
    """What tests/test_app_e2e.py's tool test relies on: {'tool_calls': [...]} from chat_reply
    reaches the official SDK as function calls, in the Chat Completions and Responses shapes."""
    from memoryplus.testing.scripted_llm import ScriptedLLMServer
    call = {"name": "memory_search", "arguments": {"query": "dentist"}}
    server = ScriptedLLMServer(chat_reply=lambda body: {"tool_calls": [call]}).start()
    try:
        client = openai.OpenAI(api_key="sk-test", base_url=server.base_url)
        tools = [{"type": "function", "function": {"name": "memory_search", "parameters": {"type": "object"}}}]
        chat = client.chat.completions.create(model="scripted-llm", messages=[{"role": "user", "content": "hi"}],
                                              tools=tools, stream=stream)
        if stream:
            got = [tc for chunk in chat for choice in chunk.choices for tc in (choice.delta.tool_calls or [])]
            fn = got[0].function
        else:
            fn = chat.choices[0].message.tool_calls[0].function
            assert chat.choices[0].finish_reason == "tool_calls"
        assert fn.name == "memory_search" and json.loads(fn.arguments) == call["arguments"]
        resp = client.responses.create(model="scripted-llm", input="hi", stream=stream,
                                       tools=[{"type": "function", "name": "memory_search",
                                               "parameters": {"type": "object"}}])
        if stream:
            resp = [e for e in resp if e.type == "response.completed"][0].response
        item = resp.output[0]
        assert item.type == "function_call" and item.name == "memory_search"
        assert json.loads(item.arguments) == call["arguments"] and item.call_id
    finally:
        server.stop()
