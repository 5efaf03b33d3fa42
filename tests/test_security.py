"""Security properties checked directly: secrets reach the worker over stdin only, files are
the user's only, Neo4j TLS URIs give an encrypted driver, real key formats are redacted."""
from __future__ import annotations

import os
import stat
import time

import pytest

from memoryplus.config.schema import Settings
from memoryplus.wire.records import Credentials

KEY = "sk-proj-SECRETsecret0123456789abcdefABCDEF"
PASSWORD = "neo4j-Pa55word-zz9"
# graphiti's Neo4jDriver schedules an index-building coroutine the offline TLS test never runs
pytestmark = pytest.mark.filterwarnings("ignore:coroutine 'Neo4jDriver._execute_index_query':RuntimeWarning")


@pytest.mark.parametrize("launch", ["python", "multiprocessing"])
def test_secrets_never_on_the_worker_command_line_or_environment(tmp_path, monkeypatch, launch):
    """Both ways of starting the worker (`python -m`; the multiprocessing spawn child a frozen
    PyGPT uses, tests/test_frozen.py): not even a key in PyGPT's own environment gets through."""
    from memoryplus.client.worker_client import WorkerClient
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    settings = Settings(extraction_engine="local", embedding_provider="local", override_api_key=KEY,
                        neo4j_password=PASSWORD)
    client = WorkerClient(settings, tmp_path / "data", Credentials(openai_api_key=KEY), mode="persistent",
                          app="test", launch=launch).start()
    try:
        end = time.monotonic() + 60
        while not client.status().get("pid") and time.monotonic() < end:
            time.sleep(0.05)
        pid = client.status()["pid"]
        assert pid
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        environ = open(f"/proc/{pid}/environ", "rb").read()
        for secret in (KEY, PASSWORD):
            assert secret.encode() not in cmdline and secret.encode() not in environ
        assert os.path.realpath(f"/proc/{pid}/cwd") == str((tmp_path / "data").resolve())
        client.call("health", {}, timeout=60)
        assert KEY not in str(client.status()) and PASSWORD not in str(client.status())
        mode = stat.S_IMODE(os.stat(tmp_path / "data").st_mode)
        assert mode == 0o700, oct(mode)
    finally:
        client.close()
    logs = tmp_path / "data" / "logs"
    for f in logs.rglob("*") if logs.exists() else []:
        if f.is_file():
            text = f.read_text("utf-8", "replace")
            assert KEY not in text and PASSWORD not in text
            assert stat.S_IMODE(f.stat().st_mode) == 0o600


def test_spool_is_readable_by_the_user_only(tmp_path):
    from memoryplus.plugin.queue import IngestQueue
    from memoryplus.wire.records import Turn
    q = IngestQueue(tmp_path / "spool", Settings(), lambda bank, turns: None)
    q.start()
    try:
        q.put("b", Turn(id="1", user="hello"))
        assert q.wait_spooled(5)
    finally:
        q.stop(timeout=5)
    assert stat.S_IMODE(os.stat(tmp_path / "spool").st_mode) == 0o700
    files = [f for f in (tmp_path / "spool").iterdir() if f.is_file()]
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)


@pytest.mark.parametrize("uri,encrypted", [("bolt+s://127.0.0.1:1", True), ("neo4j+s://127.0.0.1:1", True),
                                           ("bolt+ssc://127.0.0.1:1", True), ("bolt://127.0.0.1:1", False)])
async def test_neo4j_tls_uris_give_an_encrypted_driver(uri, encrypted):
    from memoryplus.engine.store import open_neo4j
    driver = open_neo4j(uri, "neo4j", PASSWORD, "neo4j")
    try:
        assert driver.client._pool.pool_config.encrypted is encrypted
    finally:
        await driver.client.close()


@pytest.mark.parametrize("secret", [
    "sk-" + "a1B2" * 12, "sk-proj-" + "Zz9_" * 10, "sk-ant-api03-" + "x" * 40, "AIza" + "S" * 35,
    "Bearer abcdef0123456789xyz"])
def test_real_key_formats_are_redacted(secret):
    from memoryplus.common.redact import MASK, redact
    text = f"request failed with key {secret} at https://user:hunter2pass@example.com/v1"
    out = redact(text)
    assert MASK in out and "hunter2pass" not in out
    assert secret.split()[-1] not in out
