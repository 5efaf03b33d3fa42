"""The README's add-on ZIP command, checked against PyGPT's own add-on installer.

`pygpt_net.core.extensions.Extensions` (Config → Install Add-on…) with its real
`RuntimePackages`, on a checkout that has run scripts/install.sh: the checkout itself is
refused (what users saw), the ZIP made by `scripts/make_addon_zip.py` installs, the same
version again is refused, and the two update routes the README names both work.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
pytest.importorskip("pygpt_net")


class _Config:
    def __init__(self, base: Path):
        self.base, self.data = base, {}

    def get_base_workdir(self) -> str:
        return str(self.base)

    get_user_path = get_base_workdir

    def get(self, key, default=None):
        return self.data.get(key, default)


def pygpt_extensions(base: Path):
    """PyGPT's add-on core as its window holds it (config and runtime packages)."""
    from pygpt_net.core.extensions import Extensions
    from pygpt_net.core.runtime_packages import RuntimePackages
    window = SimpleNamespace(core=SimpleNamespace(config=_Config(base), debug=None))
    window.core.packages = RuntimePackages(window)
    window.core.extensions = Extensions(window)
    return window.core.extensions


def checkout_after_install(dest: Path) -> Path:
    """This repository as `bash scripts/install.sh` leaves it: a .venv (with lib64 → lib, as
    venv makes it, and more than PyGPT's 256 MB), git metadata, byte-code caches."""
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "dist", "*.pyc"))
    (dest / ".venv" / "lib").mkdir(parents=True)
    (dest / ".venv" / "lib64").symlink_to("lib")
    with open(dest / ".venv" / "lib" / "big.so", "wb") as f:
        f.truncate(300 * 1024 * 1024)       # sparse: no disk used
    (dest / ".git").mkdir()
    (dest / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (dest / "worker" / "__pycache__").mkdir()
    (dest / "worker" / "__pycache__" / "client.cpython-311.pyc").write_bytes(b"\0" * 64)
    return dest


def make_zip(checkout: Path) -> Path:
    """The README's command, run in the checkout."""
    out = subprocess.run([sys.executable, "scripts/make_addon_zip.py"], cwd=checkout, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip())


def test_the_readme_zip_installs_through_pygpts_installer_and_updates(tmp_path):
    from pygpt_net.core.extensions.extensions import ExtensionAlreadyInstalled, ExtensionError
    src = checkout_after_install(tmp_path / "checkout")
    ext = pygpt_extensions(tmp_path / "pygpt")
    with pytest.raises(ExtensionError, match="symlinks|256 MB"):
        ext.import_directory(str(src))           # "pick this directory" on a checkout: refused

    archive = make_zip(src)
    version = json.loads((src / "manifest.json").read_text())["version"]
    assert archive == src / "dist" / f"memoryplus-addon-{version}.zip"
    names = zipfile.ZipFile(archive).namelist()
    assert "memoryplus/manifest.json" in names and "memoryplus/addon.py" in names
    assert "memoryplus/client/frozen.py" in names and "memoryplus/plugin/plugin.py" in names
    assert all(n.startswith("memoryplus/") for n in names), names
    leaked = [n for n in names if any(part in n.split("/") for part in (".venv", ".git", "__pycache__", "tests", "dist"))]
    assert not leaked, leaked
    assert archive.stat().st_size < 5 * 1024 * 1024

    installed = ext.import_zip(str(archive))
    dest = tmp_path / "pygpt" / "addons" / "plugins" / "memoryplus"
    assert installed["id"] == "memoryplus" and Path(installed["_path"]) == dest
    assert (dest / "addon.py").is_file() and (dest / "client" / "worker_client.py").is_file()
    assert not (dest / ".venv").exists() and not (dest / "memoryplus").exists()

    # the same version again is refused; update route 1: uninstall, then install
    with pytest.raises(ExtensionAlreadyInstalled, match="already installed"):
        ext.import_zip(str(archive))
    assert ext.uninstall("memoryplus")
    ext.import_zip(str(archive))
    assert [m["version"] for m in ext.list_installed() if m["id"] == "memoryplus"] == [version]

    # update route 2: a ZIP with a higher manifest version replaces the installed one directly
    manifest = json.loads((src / "manifest.json").read_text())
    manifest["version"] = version + ".post1"
    (src / "manifest.json").write_text(json.dumps(manifest))
    newer = make_zip(src)
    ext.import_zip(str(newer))
    assert [m["version"] for m in ext.list_installed() if m["id"] == "memoryplus"] == [version + ".post1"]
    assert json.loads((dest / "manifest.json").read_text())["version"] == version + ".post1"
