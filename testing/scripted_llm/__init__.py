"""A scripted LLM served as an OpenAI-compatible HTTP server on the loopback address.

Tests, the demo, the benchmark and chaos runs point the real ``openai`` client (and
graphiti's real ``OpenAIClient`` / ``OpenAIGenericClient`` / ``OpenAIEmbedder``) at
``ScriptedLLMServer().base_url``, so the whole client path runs: base URL, API key,
structured output (``responses.parse`` and ``response_format``), streaming, retries,
timeouts.  Nothing leaves 127.0.0.1.

Endpoints (also accepted without the ``/v1`` prefix):

* ``POST /v1/chat/completions``  non-streamed and ``stream: true`` (SSE); ``response_format``
  json_schema / json_object / none; ``logprobs`` requests (graphiti's OpenAIRerankerClient)
  get a True/False token with top_logprobs.
* ``POST /v1/responses``  non-streamed (the shape ``client.responses.parse`` accepts) and
  ``stream: true`` (the full Responses SSE event sequence, ``instructions`` honoured).
* ``POST /v1/embeddings``  deterministic hashed bag-of-words + character trigrams,
  L2-normalised; float or base64 encoding; list input.
* ``GET /v1/models``.

Structured requests are answered by :class:`ScriptedBrain`, which dispatches on the
response-model / json-schema name graphiti sends and reads graphiti's own prompt tags.
Unknown schemas get a minimal valid instance built from the JSON schema.

Standalone::

    python -m memoryplus.testing.scripted_llm --port 8765 --latency-ms 50

The package, by seam:

* ``server.py``      ScriptedLLMServer: life cycle, recording, the standalone command;
* ``handler.py``     the HTTP handler: routes, LLM and embeddings endpoints, SSE streaming;
* ``wire.py``        the OpenAI wire format: reading requests, shaping answers;
* ``faults.py``      fault injection (what each fault kind does to a call);
* ``brain.py``       ScriptedBrain, which answers graphiti's structured prompts;
* ``extractor.py``, ``english.py``, ``prompts.py``  its second English extractor and prompt reading;
* ``schema_fill.py`` minimal instances of a JSON schema, required fields filled in;
* ``own_text.py`` its copies of the product's stemmer, stop words, sentence splitter and
  trigram embedder (kept apart so that they can be unified with the product's).
"""

from __future__ import annotations

from memoryplus.testing.scripted_llm.brain import ScriptedBrain
from memoryplus.testing.scripted_llm.faults import FAULT_KINDS
from memoryplus.testing.scripted_llm.schema_fill import minimal_instance
from memoryplus.testing.scripted_llm.server import ScriptedLLMServer, main
from memoryplus.testing.scripted_llm.own_text import DEFAULT_EMBEDDING_DIM, embed_text
from memoryplus.testing.scripted_llm.wire import last_user_text, mask_secret, request_text

__all__ = [
    'DEFAULT_EMBEDDING_DIM',
    'FAULT_KINDS',
    'ScriptedBrain',
    'ScriptedLLMServer',
    'embed_text',
    'last_user_text',
    'mask_secret',
    'minimal_instance',
    'request_text',
    'main',
]
