"""The settings schema: every spec option, one declaration, clear errors."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from memoryplus.config import schema
from memoryplus.config.schema import Settings, SettingsError, validate, validate_lenient

SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec" / "memoryplus-spec.txt"


def spec_labels() -> list[str]:
    text = SPEC.read_text(encoding="utf-8")
    section = text.split("Configuration Options", 1)[1].split("Memory Modes\n\nMemoryPlus offers", 1)[0]
    return re.findall(r"^• ([^:\n]+):\n  • Type", section, flags=re.M)


@pytest.mark.skipif(not SPEC.exists(), reason="the shared spec is not beside this checkout")
def test_every_spec_option_is_declared_with_its_label():
    labels = {o.label for o in schema.options()}
    missing = [label for label in spec_labels() if label not in labels]
    assert len(spec_labels()) >= 40
    assert missing == []


def test_every_option_has_tab_label_description_and_a_widget_kind():
    for o in schema.options():
        assert o.tab in schema.TABS, o.id
        assert o.label and len(o.description) > 15, o.id
        assert o.kind in {"bool", "int", "float", "text", "textarea", "combo", "cmd"}, o.id
        if o.kind == "combo":
            assert o.choices or o.use, o.id
        if o.kind in ("int", "float"):
            assert o.ge is not None and o.le is not None and o.ge <= o.default <= o.le, o.id


def test_deliberate_differences_from_the_spec():
    s = Settings()
    assert s.backend == "kuzu" and s.embedding_provider == "auto" and s.engine_mode == "auto"
    assert s.context_limit == 10 and s.search_depth == 10 and s.memory_mode == "Chatbot"


def test_validation_names_the_setting_and_hides_secrets():
    with pytest.raises(SettingsError) as err:
        validate({"context_limit": 500, "overflow_policy": "explode", "neo4j_password": 12})
    text = str(err.value)
    assert "'Context Limit' (context_limit)" in text
    assert "'Ingestion Overflow Policy' (overflow_policy)" in text
    assert "12" not in text.replace("(hidden)", "")


def test_lenient_validation_keeps_defaults_for_bad_values():
    s, problems = validate_lenient({"context_limit": "lots", "batch_size": 7, "unknown": 1})
    assert s.context_limit == 10 and s.batch_size == 7
    assert len(problems) == 1 and "context_limit" in problems[0]


def test_settings_mirror_roundtrip(tmp_path):
    from memoryplus.config.paths import load_settings, save_settings
    save_settings(tmp_path, Settings(memory_mode="Research", override_api_key="sk-test"))
    s, problems = load_settings(tmp_path)
    assert s.memory_mode == "Research" and problems == []
    assert (tmp_path / "settings.json").stat().st_mode & 0o077 == 0, "readable by the user only"
    (tmp_path / "settings.json").write_text("{not json")
    s, problems = load_settings(tmp_path)
    assert s == Settings() and problems


def test_settings_doc_is_up_to_date():
    from memoryplus.config.docs import render
    doc = Path(__file__).resolve().parents[1] / "docs" / "SETTINGS.md"
    assert doc.read_text(encoding="utf-8") == render(), "run: python -m memoryplus.config.docs"


def test_options_and_defaults_need_no_pydantic_and_settings_is_built_from_them():
    """PyGPT's start registers the options without pydantic; `Settings` is built on first use
    from the same declaration (same defaults, ranges and metadata)."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from memoryplus.config import schema\n"
            "infos = schema.options(); d = schema.defaults(); schema.option('context_limit')\n"
            "assert schema.SECRET_OPTIONS and len(infos) == len(d) >= 40\n"
            "assert 'pydantic' not in sys.modules, sorted(m for m in sys.modules if 'pydantic' in m)\n"
            "from memoryplus.config.schema import Settings\n"
            "assert 'pydantic' in sys.modules and schema.Settings is Settings\n"
            "assert Settings().model_dump() == d\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Settings.__module__ == "memoryplus.config.schema" and Settings.__name__ == "Settings"
    assert Settings().model_dump() == schema.defaults()
    for info in schema.options():
        field = Settings.model_fields[info.id]
        assert field.description == info.description and field.json_schema_extra["label"] == info.label
    with pytest.raises(ValidationError, match="context_limit"):
        Settings(context_limit=0)
    s = Settings()
    with pytest.raises(ValidationError, match="batch_size"):      # validate_assignment, as before
        s.batch_size = 0
    assert Settings(unknown_option=1).model_dump() == schema.defaults()   # extra="ignore"


def test_option_proofs_table_points_at_code_that_exists():
    """scripts/check_option_proofs.py mutates where each option is read; when code moves, the
    table must move with it, or the (hand-run, 25-minute) proofs check silently proves less."""
    import importlib.util
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("check_option_proofs", root / "scripts" / "check_option_proofs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    stale = [f"{opt}: {rel}: {old.strip()!r}" for opt, entries in mod.MUTATIONS.items()
             for rel, old, _ in entries
             if not (root / rel).is_file() or old not in (root / rel).read_text(encoding="utf-8")]
    assert not stale, "stale entries in scripts/check_option_proofs.py MUTATIONS:\n" + "\n".join(stale)
