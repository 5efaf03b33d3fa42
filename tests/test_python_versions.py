"""MemoryPlus installs and is tested on every Python PyGPT ships on (the AppImage's 3.10, the Snap's
3.12, 3.11 and 3.13 from pip): the declared range, the pins and the versions CI tests agree."""
from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "test_other_pythons.sh"
MAIN_SUITE = "3.11"   # .ci/run's main suite: scripts/install.sh's python3 with PyGPT


def supported() -> list[str]:
    spec = re.search(r'^requires-python\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    return [f"3.{minor}" for minor in range(30) if f"3.{minor}" in SpecifierSet(spec.group(1))]


def bash_array(name: str) -> list[str]:
    body = re.search(rf"^{name}=\((.*?)^\)", SCRIPT.read_text(), re.M | re.S).group(1)
    return [line.split("#")[0].strip() for line in body.splitlines() if line.split("#")[0].strip()]


def pins(path: Path, python: str) -> list[str]:
    """The packages `path` installs on `python`, following `-r` includes."""
    names = []
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            names += pins(path.parent / line[3:].strip(), python)
            continue
        req = Requirement(line)
        assert req.specifier and str(req.specifier).startswith("=="), f"{path.name}: {line} is not pinned"
        if req.marker is None or req.marker.evaluate({"python_version": python}):
            names.append(canonicalize_name(req.name))
    return names


def test_every_supported_python_is_tested_in_ci():
    assert supported() == ["3.10", "3.11", "3.12", "3.13"]
    ci = (ROOT / ".ci" / "run").read_text()
    others = re.search(r"scripts/test_other_pythons\.sh((?: 3\.\d+)+)", ci).group(1).split()
    assert sorted([MAIN_SUITE, *others], key=lambda v: int(v.split(".")[1])) == supported()


def test_each_supported_python_gets_exactly_one_pin_of_each_package():
    for python in supported():
        for path in ("requirements.txt", "requirements-engine.txt", "requirements-nodeps.txt"):
            names = pins(ROOT / path, python)
            twice = {n for n in names if names.count(n) > 1}
            assert not twice, f"{path} pins {sorted(twice)} more than once for Python {python}"
        engine = set(pins(ROOT / "requirements-engine.txt", python))
        assert {"graphiti-core", "kuzu", "numpy", "pytest"} <= engine, python


def test_the_tests_left_out_on_the_other_pythons_exist():
    files, tests = bash_array("NEEDS_PYGPT"), bash_array("NEEDS_PYGPT_TESTS")
    assert files and tests
    for f in files:
        assert (ROOT / f).is_file(), f"{SCRIPT.name} leaves out {f}, which does not exist"
    for t in tests:
        f, name = t.split("::")
        assert re.search(rf"^(async )?def {name}\(", (ROOT / f).read_text(), re.M), \
            f"{SCRIPT.name} leaves out {t}, which does not exist"
