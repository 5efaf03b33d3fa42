"""Embedders that need no network: the offline default and a deterministic test embedder.

`LocalEmbedder` wraps WordLlama (MIT, 256-d static embeddings shipped inside the wheel, so
nothing is downloaded at run time; see docs/SETTINGS.md and reference/anchors.md §4 for why
it was chosen). `HashEmbedder` is a hashed bag-of-words plus character trigrams: stable
across runs and machines, for tests and benchmarks that must not depend on model weights.
"""
from __future__ import annotations

import itertools
import math
import mmap
import os
import threading
from pathlib import Path

import numpy as np

from graphiti_core.embedder.client import EmbedderClient

from memoryplus.common.text import WORD, char_trigrams, feature_hash


EMBED_BATCH = 64            # texts tokenized at once (WordLlama's own batch)
# Texts per embeddings request: providers cap a request (OpenAI at 2,048 texts and 300,000
# tokens, Gemini at 100), and a bank's turns are read back thousands at once.
REQUEST_TEXTS = 64
POOL_TOKENS = 32768         # token vectors gathered at once: 32 MB at 256-d


class LocalEmbedder(EmbedderClient):
    name = "local:wordllama-l2-256"
    dim = 256
    config = "l2_supercat"      # the WordLlama model: its weights file is named by it and `dim`
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
                home = Path(wordllama.__file__).parent
                model = WordLlama.load(cls.config, cache_dir=home,
                                       disable_download=True, dim=cls.dim)
                # Its tokenizer no longer pads a batch to its longest text (nor computes
                # offsets: encode_batch_fast): embed_array reads each text's own ids, and the
                # padding was half of embedding a reply's ~20 sentences. The model's own
                # `embed` needs padding and is not used. Not a copy: a copy of the tokenizer
                # (`Tokenizer.from_str(to_str())`) held 42 MB more in every worker.
                model.tokenizer.no_padding()
                mapped = _mapped_table(home / "weights" / WordLlama.get_filename(cls.config, cls.dim),
                                       model.embedding)
                if mapped is not None:
                    model.embedding = mapped
                cls._model = model
        return cls._model

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in self.embed_array(texts)]

    def embed_array(self, texts: list[str], dims: int | None = None) -> np.ndarray:
        """WordLlama's normalised mean of token vectors (its `embed(norm=True)`), one row per
        text, computed over each text's own tokens: `embed` pads a batch of 64 to its longest
        text and holds batch × longest × 256 floats, so one pasted page among short
        messages made it slow and took hundreds of MB. `dims`: only the first ones (the
        model is trained to be cut there), renormalised."""
        model = self._load()
        encode = getattr(model.tokenizer, "encode_batch_fast", model.tokenizer.encode_batch)
        table = model.embedding if dims is None else model.embedding[:, :dims]
        out = np.zeros((len(texts), table.shape[1]), np.float32)
        pending: list[tuple[int, list[int]]] = []
        held = 0

        def pool() -> None:
            # one array, one clip, one gather for all the pending texts (not per text)
            ids = np.fromiter(itertools.chain.from_iterable(t for _, t in pending), np.int64, held)
            np.clip(ids, 0, table.shape[0] - 1, out=ids)
            lengths = np.fromiter((len(t) for _, t in pending), np.int64, len(pending))
            starts = np.concatenate(([0], np.cumsum(lengths[:-1])))
            # summed in float32 whatever the table's type (its file's float16 is mapped)
            sums = np.add.reduceat(table[ids].astype(np.float32, copy=False), starts, axis=0)
            out[[i for i, _ in pending]] = sums / lengths[:, None].astype(np.float32)
            pending.clear()

        for first in range(0, len(texts), EMBED_BATCH):
            batch = [t if t.strip() else "-" for t in texts[first:first + EMBED_BATCH]]
            for i, enc in enumerate(encode(batch, add_special_tokens=False), first):
                ids = enc.ids           # a new list at each read
                if not ids:
                    continue            # no token at all: a zero vector, as WordLlama's
                pending.append((i, ids))
                held += len(ids)
                if held >= POOL_TOKENS:
                    pool()
                    held = 0
        if pending:
            pool()
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)

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


def _mapped_table(path: Path, loaded: np.ndarray) -> np.ndarray | None:
    """WordLlama's token table mapped read-only from its safetensors file, as stored (float16),
    in place of the float32 copy it loads (32 MB held by every worker for good): only the
    pages of the tokens met are read, and the system can drop them. Its rows upcast are the
    loaded ones exactly (float16 → float32 is exact; three rows are checked). None when the
    file is not the plain float16 table the loaded one came from."""
    import json
    import struct
    try:
        with open(path, "rb") as f:
            head_len = struct.unpack("<Q", f.read(8))[0]
            if head_len > 1 << 20:      # a header of a few lines: this is not one
                return None
            head = json.loads(f.read(head_len))
        spec = next(v for k, v in head.items() if k != "__metadata__")
        start, end = spec["data_offsets"]
        if spec["dtype"] != "F16" or tuple(spec["shape"]) != loaded.shape or end - start != loaded.size * 2:
            return None
        table = np.memmap(path, np.float16, "r", offset=8 + head_len + start, shape=loaded.shape)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration, struct.error):
        return None
    rows = [0, loaded.shape[0] // 2, loaded.shape[0] - 1]
    return table if np.array_equal(table[rows].astype(np.float32), loaded[rows]) else None


def release_table_pages() -> None:
    """The pages of the offline embedder's mapped table dropped from this process (the worker
    calls this when idle). They were read from a read-only file mapping, so nothing is lost:
    they stay in the system's page cache, and the next texts embedded read back only the
    rows they need. The bench's 5,000 turns leave ~14 MB of them resident in the worker."""
    region = getattr(getattr(LocalEmbedder._model, "embedding", None), "_mmap", None)
    advise = getattr(region, "madvise", None)       # np.memmap's mapping; none on Windows
    if advise is not None and hasattr(mmap, "MADV_DONTNEED"):
        try:
            advise(mmap.MADV_DONTNEED)
        except (OSError, ValueError):   # a closed mapping, or a kernel that declines: kept
            pass


def sentence_embedder(bank_embedder: EmbedderClient) -> EmbedderClient | None:
    """Who embeds the sentences of the assistant's replies for the turn index: the bank's own
    embedder when it runs in this process (a reply has ~20 sentences: no provider is paid,
    nor waited on, for them), else the offline embedder when it is installed, else no one."""
    if isinstance(bank_embedder, (LocalEmbedder, HashEmbedder)):
        return bank_embedder
    return _shared_local() if LocalEmbedder.available() else None


_LOCAL: LocalEmbedder | None = None


def _shared_local() -> LocalEmbedder:
    global _LOCAL
    if _LOCAL is None:
        _LOCAL = LocalEmbedder()
    return _LOCAL


async def embed_all(embedder: EmbedderClient, texts: list[str]) -> list[list[float]]:
    """`texts` embedded by the bank's embedder, REQUEST_TEXTS to a request."""
    out: list[list[float]] = []
    for first in range(0, len(texts), REQUEST_TEXTS):
        out += await embedder.create_batch(texts[first:first + REQUEST_TEXTS])
    return out


def embed_rows(embedder: EmbedderClient, texts: list[str], dims: int | None = None) -> np.ndarray:
    """`texts` embedded by an in-process embedder (sentence_embedder), one row each; with
    `dims`, rows of at most that many (the offline embedder computes only those)."""
    if isinstance(embedder, LocalEmbedder):
        return embedder.embed_array(texts, dims)
    rows = np.asarray(embedder.embed_sync(texts), np.float32).reshape(len(texts), -1)  # type: ignore[attr-defined]
    return rows[:, :dims] if dims else rows
