"""`memoryplus doctor`: check the installation and say how to fix each problem.

One line per check: OK, WARN or FAIL, with a fix for anything not OK. Exit status 1 when
any check FAILs. Keys are never printed: at most their first three characters.
"""
from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

PACKAGES = (  # (distribution, needed by the engine itself)
    ("pygpt-net", False), ("graphiti-core", True), ("kuzu", True), ("PySide6", False),
    ("numpy", True), ("wordllama", False))
HTTP_TIMEOUT_S = 5.0


@dataclass
class Check:
    name: str
    status: str          # OK, WARN, FAIL
    message: str
    fix: str = ""


def mask(key: str) -> str:
    return (key[:3] + "…") if key else "(none)"


class Doctor:
    def __init__(self, args):
        self.args = args
        self.checks: list[Check] = []

    def add(self, name: str, status: str, message: str, fix: str = "") -> None:
        from memoryplus.common.redact import redact
        self.checks.append(Check(name, status, redact(message), redact(fix)))

    # ── the checks ────────────────────────────────────────────────────────────────────
    def python_and_packages(self) -> None:
        v = sys.version_info
        if v < (3, 10):
            self.add("python", "FAIL", f"Python {v.major}.{v.minor} is too old",
                     "install Python 3.10 or newer")
        else:
            self.add("python", "OK", f"Python {v.major}.{v.minor}.{v.micro} ({sys.executable})")
        for dist, core in PACKAGES:
            try:
                self.add(f"package {dist}", "OK", metadata.version(dist))
            except metadata.PackageNotFoundError:
                if dist == "wordllama":   # a plain install would replace PyGPT's numpy 1.26
                    from memoryplus.config.install import local_embedder_command
                    self.add(f"package {dist}", "WARN", "not installed: the local embedder falls "
                             "back to hashed word features", local_embedder_command())
                    continue
                from memoryplus.plugin.problems import requirement   # pinned, as the add-on installs it
                self.add(f"package {dist}", "FAIL" if core else "WARN", "not installed",
                         f'"{sys.executable}" -m pip install "{requirement(dist)}"')

    def settings(self):
        from memoryplus.config.paths import SETTINGS_FILE, data_dir, default_data_dir, load_settings
        from memoryplus.config.schema import SettingsError, validate
        directory = data_dir(override=self.args.data_dir) if self.args.data_dir else default_data_dir()
        settings, problems = load_settings(directory)
        path = directory / SETTINGS_FILE
        if problems:
            self.add("settings", "FAIL", "; ".join(problems),
                     f"fix or delete {path} (PyGPT writes it again when you save the MemoryPlus "
                     f"settings), then check the options in Plugins → Settings → MemoryPlus")
        elif path.is_file():
            self.add("settings", "OK", f"{path}")
        else:
            self.add("settings", "OK", f"defaults (no {path} yet)")
        values = settings.model_dump()
        for flag, key in (("backend", "backend"), ("extraction", "extraction_engine"), ("mode", "memory_mode")):
            if getattr(self.args, flag, None):
                values[key] = getattr(self.args, flag)
        try:
            settings = validate(values)
        except SettingsError as exc:
            self.add("settings", "FAIL", str(exc), "fix the command-line options")
        banks_dir = Path(self.args.data_dir).expanduser() if self.args.data_dir else data_dir(settings)
        return settings, banks_dir

    def pygpt(self) -> None:
        from memoryplus.config.paths import pygpt_workdir
        wd = pygpt_workdir()
        cfg = wd / "config.json"
        if not wd.is_dir():
            self.add("pygpt", "WARN", f"no PyGPT user data directory at {wd}",
                     "start PyGPT once (or set PYGPT_WORKDIR to its directory)")
            return
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.add("pygpt", "WARN", f"{wd} has no config.json", "start PyGPT once to create it")
            return
        except (OSError, ValueError) as exc:
            self.add("pygpt", "FAIL", f"{cfg} is unreadable ({type(exc).__name__})",
                     "restore it from PyGPT's backup or delete it so PyGPT recreates it")
            return
        enabled = (data.get("plugins_enabled") or {}).get("memoryplus") if isinstance(data, dict) else None
        if enabled:
            self.add("pygpt", "OK", f"{wd} (MemoryPlus enabled)")
        else:
            self.add("pygpt", "WARN", f"{wd} found, MemoryPlus not enabled there",
                     "run `memoryplus launch`, then Plugins menu → tick MemoryPlus")

    def data_dir(self, banks_dir: Path) -> bool:
        try:
            banks_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=banks_dir, prefix=".doctor-", delete=True) as fh:
                fh.write(b"ok")
                fh.flush()
        except OSError as exc:
            self.add("data directory", "FAIL", f"{banks_dir} is not writable: {exc.strerror or exc}",
                     "choose a writable folder in 'Kuzu Storage Path' (or --data-dir), or fix its "
                     "permissions")
            return False
        self.add("data directory", "OK", f"{banks_dir} is writable")
        return True

    def banks(self, settings, banks_dir: Path, worker_pid: int | None) -> list:
        from memoryplus.wire.banks import BankDirectory
        manifests = BankDirectory(banks_dir, settings.backend).all()
        if not manifests:
            self.add("banks", "OK", f"no {settings.backend} banks yet")
            return []
        if settings.backend != "kuzu":
            self.add("banks", "OK", f"{len(manifests)} bank(s) on Neo4j")
            return manifests
        import kuzu

        from memoryplus.engine.store import _owner_of
        for m in manifests:
            bank_dir = BankDirectory(banks_dir, "kuzu").path(m.name)
            pid, app = _owner_of(bank_dir)
            if worker_pid is not None:
                self.add(f"bank {m.name}", "OK", f"open in the running worker (pid {worker_pid})")
                continue
            try:
                db = kuzu.Database(str(bank_dir / "graph.kuzu"), read_only=True,
                                   buffer_pool_size=64 * 1024 * 1024)
                db.close()
            except RuntimeError as exc:
                text = str(exc)
                if "lock" in text.lower():
                    who = f"{app or 'a process'}, pid {pid}" if pid else "another process"
                    self.add(f"bank {m.name}", "FAIL", f"locked by {who}",
                             f"close {who} (or run the command while PyGPT runs, so it goes "
                             f"through PyGPT's worker)" + (f"; kill {pid} if it hangs" if pid else ""))
                else:
                    self.add(f"bank {m.name}", "FAIL", f"cannot be opened: {text.splitlines()[0][:160]}",
                             f"restore it from an export (`memoryplus import --bank {m.name} FILE`) "
                             f"or clear it")
                continue
            self.add(f"bank {m.name}", "OK", f"opens, not locked ({m.embedder})")
        return manifests

    def worker(self, settings, banks_dir: Path, creds):
        from memoryplus.client.worker_client import WorkerClient, connect_existing
        from memoryplus.service import RemoteMemoryService
        client = connect_existing(banks_dir, timeout=3)
        if client is not None:
            service = RemoteMemoryService(client)
            try:
                h = service.health(timeout=10).result()
                self.add("worker", "OK", f"running worker reached (pid {h.pid}, {h.extraction} extraction)")
                return h.pid
            except Exception as exc:
                self.add("worker", "FAIL", f"the running worker does not answer: {exc}",
                         "restart PyGPT")
                return None
            finally:
                service.close(timeout=3)
        client = WorkerClient(settings, banks_dir, creds, mode="subprocess", app="memoryplus doctor")
        service = RemoteMemoryService(client)
        try:
            client.start()
            h = service.health(timeout=60).result()
            self.add("worker", "OK", f"a worker process starts and answers ({h.extraction} extraction)")
        except Exception as exc:
            self.add("worker", "FAIL", f"the worker does not start: {str(exc).splitlines()[0][:200]}",
                     "set Worker Python (Advanced) to an interpreter with memoryplus installed; "
                     "run with -v for details")
        finally:
            service.close(timeout=5)
        return None

    def llm(self, settings, creds) -> None:
        from memoryplus.engine.providers import OLLAMA_DEFAULT_URL, resolve_llm
        choice = resolve_llm(settings, creds)
        if not choice.configured:
            if settings.extraction_engine == "llm":
                self.add("llm provider", "FAIL", f"no credentials for the {choice.provider} LLM",
                         "set 'Override API Key' (or OPENAI_API_KEY), or choose local extraction")
            else:
                self.add("llm provider", "OK", "none configured: local extraction")
            return
        if choice.provider == "google":
            base = (choice.base_url or "https://generativelanguage.googleapis.com/v1beta").rstrip("/")
            url, headers = f"{base}/models?pageSize=1", {"x-goog-api-key": choice.api_key}
        else:
            default = OLLAMA_DEFAULT_URL if choice.provider == "ollama" else "https://api.openai.com/v1"
            base = (choice.base_url or default).rstrip("/")
            url, headers = f"{base}/models", {"Authorization": f"Bearer {choice.api_key}"}
        what = f"{choice.provider} at {base} (key {mask(choice.api_key)})"
        try:
            req = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                resp.read(1 << 16)
            self.add("llm provider", "OK", f"{what} answers")
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                self.add("llm provider", "FAIL", f"{what} rejects the key (HTTP {exc.code})",
                         "set a valid key in 'Override API Key' or PyGPT's provider settings")
            else:
                self.add("llm provider", "WARN", f"{what}: GET /models gave HTTP {exc.code}",
                         "check 'Override Base URL' (it should end in /v1 for OpenAI-compatible servers)")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            self.add("llm provider", "FAIL", f"{what} is unreachable: {reason}",
                     "start the server or fix 'Override Base URL' / the LLM Provider setting")

    def embeddings(self, settings, creds, manifests) -> None:
        from memoryplus.engine.providers import build_embedder, resolve_embedder

        async def probe(choice):
            emb = build_embedder(choice)
            return len(await asyncio.wait_for(emb.create("memoryplus doctor probe"), 20))

        try:
            choice = resolve_embedder(settings, creds)
            try:
                dim = asyncio.run(probe(choice))
            except Exception as exc:
                from memoryplus.engine.providers import embeddings_unserved, local_choice
                if not (choice.local_if_unserved and embeddings_unserved(exc)):
                    raise
                self.add("embeddings", "OK", f"{choice.why}, which serves no embeddings "
                         f"(HTTP {getattr(exc, 'status_code', '?')}): new banks get the local embedder")
                choice = local_choice("")
                dim = asyncio.run(probe(choice))
            key = f", key {mask(choice.api_key)}" if choice.api_key and choice.provider != "ollama" else ""
            hashed = choice.provider == "hash"     # the offline embedder is missing
            why, _, fix = choice.why.partition(". To install it")
            message = f"{choice.provider}:{choice.model} returns {dim} dimensions{key}"
            self.add("embeddings", "WARN" if hashed else "OK", f"{message} ({why})" if why else message,
                     f"to install it{fix}" if hashed and fix else "")
        except Exception as exc:
            self.add("embeddings", "FAIL", f"the embedder fails: {str(exc).splitlines()[0][:200]}",
                     "check the Embedding Provider, Base URL and API Key settings, or choose local")
            return
        for m in manifests:
            try:
                c = resolve_embedder(settings, creds, m.embedder)
                if c.id != m.embedder:
                    self.add(f"embedding dims {m.name}", "FAIL",
                             f"built with {m.embedder} ({m.embedding_dim} dimensions), settings give {c.id}",
                             f"switch the embedding settings back, or `memoryplus reembed --bank {m.name}`")
                    continue
                got = asyncio.run(probe(c))
            except Exception as exc:
                self.add(f"embedding dims {m.name}", "FAIL", f"its embedder fails: {str(exc).splitlines()[0][:200]}",
                         "check the embedding settings the bank was built with")
                continue
            if got != m.embedding_dim:
                self.add(f"embedding dims {m.name}", "FAIL",
                         f"the bank holds {m.embedding_dim}-dimension vectors but {m.embedder} now returns {got}",
                         f"use the embedding model the bank was built with, or `memoryplus reembed --bank {m.name}`")
            else:
                self.add(f"embedding dims {m.name}", "OK", f"{got} dimensions, as recorded")

    def neo4j(self, settings) -> None:
        if settings.backend != "neo4j":
            return
        try:
            from neo4j import GraphDatabase
            driver = GraphDatabase.driver(settings.neo4j_uri, auth=(settings.neo4j_user, settings.neo4j_password),
                                          connection_timeout=HTTP_TIMEOUT_S, max_connection_lifetime=30)
            try:
                driver.verify_connectivity()
            finally:
                driver.close()
            self.add("neo4j", "OK", f"{settings.neo4j_uri} reachable")
        except Exception as exc:
            self.add("neo4j", "FAIL", f"{settings.neo4j_uri}: {str(exc).splitlines()[0][:200]}",
                     "start Neo4j, or fix Neo4j URI / User / Password (Database tab)")

    # ── running ───────────────────────────────────────────────────────────────────────
    def run(self) -> int:
        from memoryplus.wire.records import Credentials
        from memoryplus.common.redact import register
        self.python_and_packages()
        settings, banks_dir = self.settings()
        creds = Credentials.from_env()
        register(settings.neo4j_password, settings.override_api_key, settings.embedding_api_key,
                 creds.openai_api_key, creds.google_api_key)
        self.pygpt()
        writable = self.data_dir(banks_dir)
        from memoryplus.wire import protocol as P
        info = P.live_worker(banks_dir) if writable else None
        worker_pid = None
        if writable:
            worker_pid = self.worker(settings, banks_dir, creds)
            if worker_pid is None and info is not None:
                worker_pid = info.pid
        manifests = self.banks(settings, banks_dir, worker_pid) if writable else []
        self.llm(settings, creds)
        self.embeddings(settings, creds, manifests)
        self.neo4j(settings)
        return 1 if any(c.status == "FAIL" for c in self.checks) else 0


def run_doctor(args) -> int:
    doc = Doctor(args)
    try:
        code = doc.run()
    except Exception as exc:  # a check that crashed is a finding too, not a traceback
        doc.add("doctor", "FAIL", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}",
                "run with -v and report it")
        code = 1
    if getattr(args, "json", False):
        print(json.dumps([asdict(c) for c in doc.checks], ensure_ascii=False))
    else:
        for c in doc.checks:
            line = f"{c.status:<4}  {c.name}: {c.message}"
            if c.fix and c.status != "OK":
                line += f"\n      fix: {c.fix}"
            print(line)
        n_fail = sum(c.status == "FAIL" for c in doc.checks)
        n_warn = sum(c.status == "WARN" for c in doc.checks)
        print(f"{n_fail} problem(s), {n_warn} warning(s)" if n_fail or n_warn else "everything looks fine")
    return code
