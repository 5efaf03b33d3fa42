"""One worker per data directory, and what it owes its clients (wire/protocol.py's docstring):
the hello that tells a socket client which of its settings do not govern, the bank events
every client gets, and the transport with its token (wire/transport.py), on real worker
processes and, for the plugin, in PyGPT's real host."""
from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest

from memoryplus.client.worker_client import WorkerClient, WorkerError, connect_existing
from memoryplus.config.schema import Settings, options
from memoryplus.wire import protocol as P
from memoryplus.wire import transport as T
from memoryplus.wire.banks import episode_uuid, slug

BANK = "default"
ROOT = Path(__file__).resolve().parents[1]


def settings(**values) -> Settings:
    values.setdefault("extraction_engine", "local")
    values.setdefault("embedding_provider", "local")
    return Settings(**values)


@pytest.fixture
def owner(tmp_path):
    made: list[WorkerClient] = []

    def make(data_dir: Path | None = None, **values) -> WorkerClient:
        c = WorkerClient(settings(**values), data_dir or tmp_path / "data", mode="persistent",
                         backoff_s=0.05).start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.close(timeout=10)


def wait_until(check, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


def ready(c: WorkerClient) -> WorkerClient:
    assert wait_until(lambda: c.status()["state"] == "ready", 90), c.status()
    return c


# ── the governing settings, and what a client whose settings differ is told ──────────────
def test_every_option_the_engine_reads_is_a_governing_one():
    """A socket client is told about every option that governs the banks: the list in
    wire/protocol.py cannot fall behind what engine/ reads."""
    engine_text = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "engine").rglob("*.py"))
    read = {o.id for o in options() if re.search(rf"\b{o.id}\b", engine_text)}
    assert read - P.GOVERNING_SETTINGS == set()
    assert "embedding_provider" in P.GOVERNING_SETTINGS and "search_cache_ttl" not in P.GOVERNING_SETTINGS


def test_a_socket_client_with_other_settings_is_told_what_governs_and_is_not_locked_out(tmp_path, owner):
    data_dir = tmp_path / "data"
    c = ready(owner(data_dir))
    c.call("ingest", {"bank": BANK, "turns": [{"id": "t1", "user": "My sister Ilse lives in Graz.",
                                               "assistant": "Noted."}]}, timeout=120)
    built = c.call("stats", {"bank": BANK}, timeout=60)
    mine = settings(embedding_provider="ollama", memory_mode="MemoryGate",
                    embedding_api_key="sk-never-sent-0123456789abcdef")
    cli = connect_existing(data_dir, settings=mine, timeout=10)
    assert cli is not None
    try:
        conflicts = cli.status()["conflicts"]
        said = "\n".join(conflicts)
        assert any(line.startswith("embedding_provider: the worker of PyGPT uses 'local'") for line in conflicts), said
        assert any(line.startswith("memory_mode:") and "'MemoryGate'" in line for line in conflicts), said
        # the bank's embedder: what it was built with, what the client's settings would give, the fix
        embedder = [line for line in conflicts if line.startswith(f"bank {BANK!r} was built with")]
        assert embedder and "yours would give ollama:" in embedder[0] and "memoryplus reembed --bank default" in embedder[0], said
        assert "sk-never-sent" not in said
        # not locked out: it searches with the bank's own embedder, under the owner's settings
        hits = cli.call("search", {"bank": BANK, "query": "Where does Ilse live?"}, timeout=60)
        assert any("Graz" in h["text"] for h in hits), hits
        assert cli.call("stats", {"bank": BANK}, timeout=60)["episodes"] == built["episodes"]
        # the owner sees no conflict: its settings are the ones that govern
        assert c.status()["conflicts"] == []
    finally:
        cli.close(timeout=5)
    # the same settings as the owner's: nothing to say
    same = connect_existing(data_dir, settings=settings(), timeout=10)
    try:
        assert same is not None and same.status()["conflicts"] == []
    finally:
        same.close(timeout=5)


def test_a_bank_the_governing_settings_cannot_read_gives_every_client_a_typed_error_naming_the_fix(tmp_path, owner):
    data_dir = tmp_path / "data"
    first = ready(owner(data_dir))
    first.call("remember", {"bank": BANK, "text": "The spare key is under the blue pot."}, timeout=120)
    first.close(timeout=10)
    unserved = dict(embedding_provider="ollama", embedding_base_url="http://127.0.0.1:9")
    c = ready(owner(data_dir, **unserved))                      # the owner's settings changed
    cli = connect_existing(data_dir, settings=settings(**unserved), timeout=10)
    assert cli is not None
    try:
        said = "\n".join(cli.status()["conflicts"])
        assert "every operation on it fails (EmbeddingMismatchError)" in said, said
        for client in (c, cli):
            with pytest.raises(WorkerError) as err:
                client.call("search", {"bank": BANK, "query": "spare key"}, timeout=60)
            assert err.value.type == "EmbeddingMismatchError"
            assert "was built with the embedder local" in str(err.value) and "reembed" in str(err.value)
    finally:
        cli.close(timeout=5)


def test_a_client_of_another_protocol_version_is_refused_with_the_reason(tmp_path, owner):
    data_dir = tmp_path / "data"
    ready(owner(data_dir))
    info = P.live_worker(data_dir)
    with T.connect(info.family, info.socket, info.token) as conn:
        conn.send_bytes(P.encode(P.Request(id="h", op="hello", params={"protocol": 999}, lane="control")))
        answer = P.decode(conn.recv_bytes())
    assert not answer.ok and answer.error.type == P.PROTOCOL_MISMATCH
    assert "different memoryplus versions" in answer.error.message


# ── events every client gets ──────────────────────────────────────────────────────────────
def test_every_client_hears_what_another_changed_and_forgot(tmp_path, owner):
    data_dir = tmp_path / "data"
    c = ready(owner(data_dir))
    heard: list[tuple[str, dict]] = []
    c.subscribe(lambda event, data: heard.append((event, data)))
    cli = connect_existing(data_dir, timeout=10)
    assert cli is not None
    cli_heard: list[tuple[str, dict]] = []
    cli.subscribe(lambda event, data: cli_heard.append((event, data)))
    try:
        assert cli.status()["conflicts"] == [], "a client that states no settings has none that differ"
        cli.call("ingest", {"bank": BANK, "turns": [{"id": "t1", "user": "My dentist is Dr Okafor.",
                                                     "assistant": "Noted."}]}, timeout=120)
        assert wait_until(lambda: heard), "the owner hears the socket client's ingest"
        event, data = heard[-1]
        assert event == P.BANK_CHANGED and data["bank"] == BANK and data["op"] == "ingest"
        assert data["origin"].startswith("socket#")
        c.call("remember", {"bank": BANK, "text": "Dr Okafor's practice is in Leipzig."}, timeout=120)
        assert wait_until(lambda: any(d["op"] == "remember" for e, d in cli_heard if e == P.BANK_CHANGED)), \
            "a socket client hears the owner's writes"
        n = len(heard)
        report = cli.call("forget", {"bank": BANK, "ids": [episode_uuid(slug(BANK), "t1")]}, timeout=60)
        assert report["sources"] == ["t1"]
        assert wait_until(lambda: len(heard) > n)
        event, data = heard[-1]
        assert event == P.FORGOTTEN and data["bank"] == BANK and data["caller_ids"] == ["t1"]
        n = len(heard)
        cli.call("search", {"bank": BANK, "query": "dentist"}, timeout=60)     # a read changes nothing
        cli.call("forget", {"bank": BANK, "text": "Okafor", "confirm": False}, timeout=60)   # nor a dry run
        c.call("stats", {"bank": BANK}, timeout=60)
        time.sleep(0.3)
        assert len(heard) == n, heard[n:]
    finally:
        cli.close(timeout=5)


def test_a_request_made_while_our_new_worker_loses_the_takeover_goes_to_the_winner(tmp_path, owner):
    """Two clients start a worker at the same moment (an owner gone): the one whose worker
    cannot listen joins the winner. A request its caller makes in between waits for that
    choice: sent to the worker that steps aside, it would come back cancelled."""
    data_dir = tmp_path / "data"
    a = ready(owner(data_dir))
    a.call("remember", {"bank": BANK, "text": "My aunt Rosalind keeps bees."}, timeout=120)  # a holds the bank
    b = WorkerClient(settings(), data_dir, mode="persistent", backoff_s=0.05)
    sup, made = b.supervisor, {}
    real_other, real_unless = sup.discovery.other_worker, sup._unless_another_won
    misses = iter([True])     # b misses a's worker once, as when both start together

    def other_worker(mode):
        return None if next(misses, False) else real_other(mode)

    def unless_another_won(ch, mode):
        assert ch is not None and ch.ready and not ch.info.get("socket"), "b's own worker lost the lock"
        made["remember"] = b.submit("remember", {"bank": BANK, "text": "My uncle Cosimo brews cider."}, 120)
        return real_unless(ch, mode)

    sup.discovery.other_worker, sup._unless_another_won = other_worker, unless_another_won
    try:
        b.start()
        assert wait_until(lambda: "remember" in made, 90), b.status()
        assert made["remember"].result(120)["stored"], "answered by the winner, not cancelled"
        assert ready(b).status()["using"] == "socket"
        found = a.call("search", {"bank": BANK, "query": "Who brews cider?"}, timeout=60)
        assert "Cosimo" in str(found)
    finally:
        b.close(timeout=10)


def test_the_plugin_drops_what_another_client_forgot_or_remembered(host):
    """The CLI (a socket client) remembers and forgets while PyGPT's worker holds the bank: the
    plugin's next search does not serve its cached answer, and a pending version of the forgotten
    turn leaves its spool instead of storing the forgotten memory again."""
    from memoryplus.testing.pygpt_host import chat_turn
    window, plugin = host()
    chat_turn(window, "My sister Ilse lives in Graz.", "Noted.", ctx_id=1)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    plugin.queue.pause("test: turns wait in the spool")
    # the same turn again (PyGPT regenerated it): a newer version waits in the spool
    chat_turn(window, "My sister Ilse lives in Graz.", "Noted, Graz it is.", ctx_id=1)
    question = "Where does my sister Ilse live these days?"
    assert "Graz" in chat_turn(window, question, "Let me think.", ctx_id=2)      # searched, cached
    assert plugin.cache.get(BANK, question), "the answer is cached"

    heard: list[str] = []
    plugin.client.subscribe(lambda event, data: heard.append(event))
    cli = connect_existing(plugin.banks_dir(), settings=plugin.settings, timeout=10)
    assert cli is not None
    try:
        cli.call("remember", {"bank": BANK, "text": "My sister Ilse also has a flat in Linz."}, timeout=120)
        assert wait_until(lambda: P.BANK_CHANGED in heard)
        assert "Linz" in chat_turn(window, question, "Let me think.", ctx_id=3), "not the cached answer"

        spool = plugin.queue.spool_path
        assert "Graz it is" in spool.read_text(encoding="utf-8")
        assert (BANK, "pygpt:1:1") in plugin.queue.pending_ids()
        report = cli.call("forget", {"bank": BANK, "ids": [episode_uuid(slug(BANK), "pygpt:1:1")]}, timeout=60)
        assert report["sources"] == ["pygpt:1:1"], report
        assert wait_until(lambda: P.FORGOTTEN in heard)
        assert wait_until(lambda: "Graz it is" not in spool.read_text(encoding="utf-8")), \
            "the forgotten turn's pending version leaves the spool at once"
        assert (BANK, "pygpt:1:1") not in plugin.queue.pending_ids()
        prompt = chat_turn(window, question, "Let me think.", ctx_id=4)
        assert "Graz" not in prompt and "Linz" in prompt, prompt

        plugin.queue.resume()
        assert plugin.queue.flush(timeout=120), plugin.queue.counts()
        episodes = cli.call("browse", {"bank": BANK, "what": "episodes", "limit": 100}, timeout=60)
        assert not any("Graz" in str(e) for e in episodes), "the forgotten turn was not stored again"
        assert not any("Graz" in h["text"] for h in cli.call("search", {"bank": BANK, "query": question},
                                                             timeout=60))
    finally:
        cli.close(timeout=5)


# ── the transport: a token on every family; the loopback port where sockets are missing ──
@pytest.mark.parametrize("forced", ["", "tcp"])
def test_the_transport_serves_only_who_knows_the_token(tmp_path, owner, monkeypatch, forced):
    monkeypatch.setenv(T.TRANSPORT_ENV, forced)
    data_dir = tmp_path / "data"
    c = ready(owner(data_dir))
    info = P.live_worker(data_dir)
    assert info is not None and len(info.token) == 64
    assert info.family == ("AF_INET" if forced else "AF_UNIX")
    if forced:
        assert re.fullmatch(r"127\.0\.0\.1:\d+", info.socket), info.socket
    assert oct(os.stat(data_dir / P.WORKER_FILE).st_mode & 0o777) == "0o600"
    c.call("remember", {"bank": BANK, "text": "The locker code is 4711."}, timeout=120)

    cli = connect_existing(data_dir, timeout=10)
    assert cli is not None
    try:
        assert cli.status()["transport"] == info.family
        assert any("4711" in h["text"] for h in cli.call("search", {"bank": BANK, "query": "locker code"},
                                                         timeout=60))
    finally:
        cli.close(timeout=5)

    with pytest.raises(T.AuthenticationError, match="refused the token"):
        T.connect(info.family, info.socket, "0" * 64)
    with pytest.raises(T.AuthenticationError):
        T.connect(info.family, info.socket, "")
    # a peer that skips the challenge and sends a request is never answered: the worker hangs up
    from multiprocessing.connection import Client
    raw = Client(T.endpoint(info.family, info.socket), info.family)
    try:
        raw.recv_bytes()                                     # the challenge
        raw.send_bytes(P.encode(P.Request(id="x", op="search", params={"bank": BANK, "query": "locker"})))
        with pytest.raises((EOFError, OSError)):
            while True:
                assert b"4711" not in raw.recv_bytes()
    finally:
        raw.close()

    # the token is in worker.json only: not in the worker's argv, environment or log
    pid = c.status()["pid"]
    if Path(f"/proc/{pid}/cmdline").exists():
        assert info.token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert info.token.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    c.close(timeout=10)
    log = (data_dir / P.LOG_DIR / P.LOG_FILE).read_text(encoding="utf-8")
    assert "refused a connection" in log and info.token not in log
    assert not (data_dir / P.WORKER_FILE).exists(), "worker.json goes with the worker"


def test_the_secret_options_are_listed_in_one_place():
    """The secrets masked by the client, the worker and the engine: config/schema.py's list,
    read by common/redact.py alone."""
    from memoryplus.common import redact
    from memoryplus.wire.records import Credentials
    s = Settings(neo4j_password="pw-neo4j-1234", override_api_key="sk-override-1234567890abcdef",
                 embedding_api_key="emb-key-123456")
    values = redact.secret_values(s, Credentials(openai_api_key="sk-pygpt-1234567890abcdef",
                                                 google_api_key="AIza-google-key"))
    assert {"pw-neo4j-1234", "sk-override-1234567890abcdef", "emb-key-123456", "sk-pygpt-1234567890abcdef",
            "AIza-google-key"} <= set(values)
    assert redact.secret_values(s.model_dump()) == redact.secret_values(s)
    users = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")
             if p.relative_to(ROOT).parts[0] not in ("tests", "dist", "build")
             and not p.relative_to(ROOT).parts[0].startswith(".")      # .venv, .git: not ours
             and "SECRET_OPTIONS" in p.read_text(encoding="utf-8")]
    assert set(users) <= {"common/redact.py", "config/schema.py", "wire/protocol.py"}, users
    engine = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "engine").rglob("*.py"))
    assert "redact.register_config(" in engine and "s.neo4j_password, s.override_api_key" not in engine
