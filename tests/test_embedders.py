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


def test_the_token_table_is_read_from_its_file_not_held_as_a_float32_copy():
    """WordLlama loads its float16 table as a 32 MB float32 array, held by every worker for
    good; ours maps the file instead, and its vectors stay WordLlama's (test above)."""
    saved = LocalEmbedder._model
    LocalEmbedder._model = None
    tracemalloc.start()
    try:
        LocalEmbedder().embed_array(["My sister lives in Porto."])
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        LocalEmbedder._model = saved
    assert kept < 8 * 2 ** 20, f"{kept / 2 ** 20:.0f} MB kept by the loaded embedder"


def test_a_weights_file_that_is_not_the_loaded_table_is_not_mapped(tmp_path):
    from memoryplus.engine.embedders import _mapped_table
    loaded = np.arange(12, dtype=np.float32).reshape(4, 3)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    assert _mapped_table(garbage, loaded) is None
    assert _mapped_table(tmp_path / "missing.safetensors", loaded) is None
    listed = tmp_path / "listed.safetensors"           # a header that is JSON but no table's
    listed.write_bytes((2).to_bytes(8, "little") + b"[]")
    assert _mapped_table(listed, loaded) is None
    from safetensors.numpy import save_file
    other = tmp_path / "other.safetensors"
    save_file({"embedding.weight": (loaded + 1).astype(np.float16)}, str(other))
    assert _mapped_table(other, loaded) is None             # same shape, other values
    same = tmp_path / "same.safetensors"
    save_file({"embedding.weight": loaded.astype(np.float16)}, str(same))
    assert np.array_equal(np.asarray(_mapped_table(same, loaded), np.float32), loaded)


def _resident_kb(path: Path) -> int:
    """This process's resident kB of the mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" in head[3]:     # a mapping's first line
            inside = len(head) > 5 and head[5] == str(path)
        elif inside and head[0] == "Rss:":
            total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_an_idle_worker_gives_back_the_table_pages_it_read_and_embeds_as_before():
    """The worker's idle step (maintenance.return_free_memory) drops the mapped table's
    resident pages; the vectors computed after it are the same to the bit."""
    from memoryplus.worker.maintenance import return_free_memory
    emb = LocalEmbedder()
    texts = [" ".join(f"word{i}x{j}" for j in range(40)) for i in range(400)]   # many rows read
    before = emb.embed_array(texts)
    table = LocalEmbedder._model.embedding
    assert isinstance(table, np.memmap), "the table is mapped from its file"
    path = Path(table.filename)
    assert _resident_kb(path) > 1024, "the texts read more than 1 MB of the table"
    return_free_memory()
    assert _resident_kb(path) < 64
    assert np.array_equal(emb.embed_array(texts), before)
