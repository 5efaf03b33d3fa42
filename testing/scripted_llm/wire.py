"""The OpenAI wire format: what a chat-completions / responses request says (its prompt, its
structured-output schema, its key) and the answers' JSON shapes."""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from typing import Any

from memoryplus.testing.scripted_llm.prompts import _section
from memoryplus.testing.scripted_llm.schema_fill import _schema_in_prompt
from memoryplus.testing.scripted_llm.own_text import _content_stems, _words

DEFAULT_MODEL_ID = 'scripted-llm'


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


def model_card(model_id: str) -> dict:
    return {'id': model_id, 'object': 'model', 'created': 0, 'owned_by': 'memoryplus-scripted'}


def structured_target(body: dict, api: str) -> tuple[str | None, dict | None, bool]:
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


def rerank_answer(prompt: str) -> tuple[str, dict]:
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
