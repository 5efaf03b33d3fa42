"""Bank names, their storage slugs and their on-disk manifests.

A bank's user-facing name is a PyGPT preset id or the fallback name: any string at all.
Storage and graphiti's `group_id` (`^[A-Za-z0-9_-]+$`) use an injective slug of it: a readable
part plus a hash of the exact name, so two names never share a bank and no name reaches a
path unescaped.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
import uuid
from dataclasses import dataclass
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9]+")
MAX_NAME_CHARS = 1000


class BankNameError(ValueError):
    pass


def check_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise BankNameError("a bank name must be a non-empty text")
    if len(name) > MAX_NAME_CHARS:
        raise BankNameError(f"a bank name may have at most {MAX_NAME_CHARS} characters")
    if "\x00" in name:
        raise BankNameError("a bank name may not contain NUL characters")
    return name


def slug(name: str) -> str:
    """Injective, filesystem- and group_id-safe id of a bank name.

    The readable part is ASCII-folded and cut to 40 characters; the hash is of the exact name
    (case, punctuation and all), so 'Work' and 'work' and 'wörk' are three banks.
    """
    check_name(name)
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    readable = _UNSAFE.sub("-", folded).strip("-").lower()[:40].strip("-") or "bank"
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}_{digest}"


def episode_uuid(bank_slug: str, caller_id: str) -> str:
    """The stored episode of a caller's turn: the same id always maps to the same episode."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"memoryplus:{bank_slug}:{caller_id}"))


@dataclass
class BankManifest:
    """What we record beside a bank: its real name and the embedder it was built with."""
    name: str
    slug: str
    backend: str
    embedder: str = ""
    embedding_dim: int = 0
    embedder_note: str = ""     # why this embedder was chosen when the bank was built

    @classmethod
    def read(cls, path: Path) -> "BankManifest | None":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.__dict__, ensure_ascii=False, indent=1), encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)


class BankDirectory:
    """Where banks live: `<root>/<backend>/<slug>/` holds the manifest (and, for Kuzu, the DB)."""

    def __init__(self, root: Path, backend: str):
        self.root = Path(root)
        self.backend = backend
        self.base = self.root / backend

    def path(self, name: str) -> Path:
        p = (self.base / slug(name)).resolve()
        if self.base.resolve() not in p.parents:  # cannot happen with a slug; belt and braces
            raise BankNameError("bank path escapes the storage directory")
        return p

    def manifest_path(self, name: str) -> Path:
        return self.path(name) / "bank.json"

    def manifest(self, name: str) -> BankManifest | None:
        return BankManifest.read(self.manifest_path(name))

    def exists(self, name: str) -> bool:
        return self.manifest(name) is not None

    def create(self, name: str, embedder: str, dim: int, note: str = "") -> BankManifest:
        m = BankManifest(name=name, slug=slug(name), backend=self.backend, embedder=embedder,
                         embedding_dim=dim, embedder_note=note)
        path = self.path(name)
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        m.write(self.manifest_path(name))
        return m

    def all(self) -> list[BankManifest]:
        if not self.base.is_dir():
            return []
        out = []
        for child in sorted(self.base.iterdir()):
            m = BankManifest.read(child / "bank.json")
            if m is not None:
                out.append(m)
        return sorted(out, key=lambda m: m.name)
