"""The HTTP handler: routes, the LLM and embeddings endpoints, SSE streaming."""

from __future__ import annotations

import base64
import json
import logging
import struct
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from memoryplus.testing.scripted_llm.faults import Fault, answer_fault, cut_short, mangle
from memoryplus.testing.scripted_llm.schema_fill import minimal_instance
from memoryplus.testing.scripted_llm.own_text import embed_text
from memoryplus.testing.scripted_llm.wire import (
    DEFAULT_MODEL_ID, _chat_completion, _chat_usage, _default_chat_reply, _first_user_text, _pieces,
    _response_object, model_card, request_text, rerank_answer, structured_target)

log = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'ScriptedLLM/1.0'
    server: Any     # the server.py _HTTPServer: its .owner is the ScriptedLLMServer

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
            self._send_json(200, {'object': 'list', 'data': [model_card(m) for m in owner.model_ids]})
        elif route.startswith('/models/'):
            self._send_json(200, model_card(route[len('/models/'):]))
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
        fault = owner._faults.take(kind, structured)
        if kind != 'embeddings' or owner.latency_embeddings:
            if owner.latency_s > 0:
                owner._sleep(owner.latency_s)
        self._answered = fault is not None and answer_fault(self, owner, fault)
        return fault

    # -- LLM endpoints ----------------------------------------------------------------
    def _llm(self, body: dict, api: str) -> None:
        owner = self.server.owner
        name, schema, structured = structured_target(body, api)
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
            text, logprobs = rerank_answer(prompt)
        else:
            reply = owner.chat_reply(body) if owner.chat_reply is not None else _default_chat_reply(body)
            if isinstance(reply, dict) and reply.get('tool_calls'):   # the model calls tools
                self._tool_calls(body, api, str(body.get('model') or DEFAULT_MODEL_ID), reply['tool_calls'])
                return
            text = str(reply)
        text = mangle(text, fault)
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

    def _tool_calls(self, body: dict, api: str, model: str, calls: list[dict]) -> None:
        """Answer with function calls ({'name', 'arguments': {...}} each), streamed or not, in
        the Chat Completions or the Responses shape (a chat_reply returning {'tool_calls': [...]})."""
        calls = [{'id': 'fc_' + uuid.uuid4().hex[:24], 'call_id': 'call_' + uuid.uuid4().hex[:24],
                  'name': str(c['name']), 'arguments': json.dumps(c.get('arguments') or {})} for c in calls]
        if api == 'chat':
            tcs = [{'id': c['call_id'], 'type': 'function',
                    'function': {'name': c['name'], 'arguments': c['arguments']}} for c in calls]
            done = _chat_completion(model, '', 1, 1)
            done['choices'][0]['message'].update(content=None, tool_calls=tcs)
            done['choices'][0]['finish_reason'] = 'tool_calls'
            if not body.get('stream'):
                self._send_json(200, done)
                return
            base = {k: done[k] for k in ('id', 'object', 'created', 'model', 'system_fingerprint')}
            base['object'] = 'chat.completion.chunk'
            self._start_sse()
            self._sse({**base, 'choices': [{'index': 0, 'delta': {'role': 'assistant', 'content': None, 'tool_calls': [
                {'index': i, **tc} for i, tc in enumerate(tcs)]}, 'logprobs': None, 'finish_reason': None}]})
            self._sse({**base, 'choices': [{'index': 0, 'delta': {}, 'logprobs': None, 'finish_reason': 'tool_calls'}]})
            self._sse('[DONE]')
            self._end_sse()
            return
        items = [{'id': c['id'], 'type': 'function_call', 'status': 'completed', 'call_id': c['call_id'],
                  'name': c['name'], 'arguments': c['arguments']} for c in calls]
        final = _response_object(body, model, '', 1, 1)
        final['output'] = items
        if not body.get('stream'):
            self._send_json(200, final)
            return
        seq = 0

        def ev(etype: str, **fields: Any) -> None:
            nonlocal seq
            self._sse({'type': etype, 'sequence_number': seq, **fields}, event=etype)
            seq += 1
        pending = {**final, 'status': 'in_progress', 'output': [], 'usage': None, 'completed_at': None}
        self._start_sse()
        ev('response.created', response=pending)
        ev('response.in_progress', response=pending)
        for i, item in enumerate(items):
            ev('response.output_item.added', output_index=i, item={**item, 'status': 'in_progress', 'arguments': ''})
            ev('response.function_call_arguments.delta', item_id=item['id'], output_index=i, delta=item['arguments'])
            ev('response.function_call_arguments.done', item_id=item['id'], output_index=i,
               name=item['name'], arguments=item['arguments'])
            ev('response.output_item.done', output_index=i, item=item)
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
        if len(texts) > owner.max_embedding_inputs:
            self._send_error_json(400, f"'$.input' is invalid: at most {owner.max_embedding_inputs} "
                                  f"inputs per request, got {len(texts)}", 'invalid_request_error')
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
            self._send_json(200, None, raw=cut_short(raw))
            return
        self._send_json(200, obj)
