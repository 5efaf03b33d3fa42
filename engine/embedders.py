"""Embedders that need no network: the offline default and a deterministic test embedder.

`LocalEmbedder` wraps WordLlama (MIT, 256-d static embeddings shipped inside the wheel, so
nothing is downloaded at run time; see docs/SETTINGS.md and reference/anchors.md §4 for why
it was chosen). `HashEmbedder` is a hashed bag-of-words plus character trigrams: stable
across runs and machines, for tests and benchmarks that must not depend on model weights.
"""
from __future__ import annotations

import math
import os
import threading
from pathlib import Path

from graphiti_core.embedder.client import EmbedderClient

from memoryplus.common.text import WORD, char_trigrams, feature_hash


class LocalEmbedder(EmbedderClient):
    name = "local:wordllama-l2-256"
    dim = 256
    _model = None
    _lock = threading.Lock()

    @staticmethod
    def available() -> bool:
        import importlib.util
        try:
            return importlib.util.find_spec("wordllama") is not None
        except (ImportError, ValueError):   # a broken install: as good as none
            return False

    @classmethod
    def _load(cls):
        with cls._lock:
            if cls._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                import wordllama
                from wordllama import WordLlama
                # The weights and tokenizer live in the package; disable_download makes a
                # missing file an error instead of a silent trip to a model hub.
                cls._model = WordLlama.load(cache_dir=Path(wordllama.__file__).parent,
                                            disable_download=True, dim=cls.dim)
        return cls._model

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vecs = self._load().embed([t if t.strip() else "-" for t in texts], norm=True)
        return [list(map(float, v)) for v in vecs]

    async def create(self, input_data) -> list[float]:
        text = input_data if isinstance(input_data, str) else " ".join(map(str, input_data))
        return self.embed_sync([text])[0]

    async def create_batch(self, input_data_list: list[str]) -> list[list[float]]:
        return self.embed_sync(list(input_data_list))


class HashEmbedder(EmbedderClient):
    """Deterministic hashed bag-of-words + character trigrams, L2-normalised."""

    def __init__(self, dim: int = 384):
        self.dim = dim
        self.name = f"hash:{dim}"

    def embed_one(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        words = [w.lower() for w in WORD.findall(text)]
        feats = list(words)
        for w in words:
            feats.extend(char_trigrams(w))
        for f in feats:
            h = feature_hash(f)
            vec[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]

    async def create(self, input_data) -> list[float]:
        text = input_data if isinstance(input_data, str) else " ".join(map(str, input_data))
        return self.embed_one(text)

    async def create_batch(self, input_data_list: list[str]) -> list[list[float]]:
        return self.embed_sync(list(input_data_list))
