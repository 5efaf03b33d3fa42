"""The offline embedder (engine/embedders.py): WordLlama's vectors, computed without padding a
batch to its longest text."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from memoryplus.engine.embedders import LocalEmbedder

pytestmark = pytest.mark.skipif(not LocalEmbedder.available(), reason="wordllama is not installed")


def test_the_vectors_are_wordllamas_own():
    emb = LocalEmbedder()
    texts = ["My sister lives in Porto.", "", "   ", "é ü 日本語 🙂", "a " * 500, "Dr. Okafor is my dentist"]
    ours = emb.embed_array(texts)
    # a WordLlama of its own (ours no longer pads, and its `embed` needs padding)
    import wordllama
    reference = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True,
                                         dim=LocalEmbedder.dim)
    theirs = reference.embed([t if t.strip() else "-" for t in texts], norm=True)
    assert ours.shape == (len(texts), 256)
    assert np.allclose(ours, theirs, atol=1e-5)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert emb.embed_sync(texts[:1])[0] == pytest.approx(list(map(float, theirs[0])), abs=1e-5)


def test_one_pasted_page_among_short_messages_takes_no_more_than_its_own_tokens():
    """WordLlama's `embed` holds batch × longest × 256 floats, twice: one 3,000-word paste
    among 63 short messages took 1.4 GB at once (measured; 23 MB now)."""
    emb = LocalEmbedder()
    texts = ["thanks, that helps"] * 63 + [" ".join(f"word{i % 500}" for i in range(3000))]
    emb.embed_array(texts[:2])                  # the model is loaded outside the measure
    tracemalloc.start()
    try:
        vectors = emb.embed_array(texts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert vectors.shape == (64, 256)
    assert peak < 64 * 2 ** 20, f"peak {peak / 2 ** 20:.0f} MB"
