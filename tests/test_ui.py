"""The memory UI (issue 5) against a real plugin in the headless PyGPT host: a real worker
process, real Kuzu, local extraction. pytest-qt drives the widgets, offscreen; every view is
saved as a PNG under test-output/ui/ (looked at by a person, see the issue)."""
from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QAbstractButton, QCheckBox, QLabel, QMenu, QMessageBox, QWidget

from memoryplus.plugin.plugin import Plugin
from memoryplus.testing import mentions_code
from memoryplus.testing.pygpt_host import LOCAL, HostWindow, chat_turn
from memoryplus.ui import graph_layout
from memoryplus.ui.common import ElidedLabel
from memoryplus.ui.graph_view import EdgeItem
from memoryplus.wire.records import Turn

SHOTS = Path(__file__).resolve().parent.parent / "test-output" / "ui"
UI_DIR = Path(__file__).resolve().parent.parent / "ui"
TIMEOUT_MS = 30_000

TURNS = [  # (user, assistant); the Berlin turn is stored 30 days back, through the client
    ("My dentist is Dr Okafor. My sister Anna lives in Munich.", "Noted."),
    ("I moved to Hamburg last month.", "Exciting!"),
    ("I love hiking in the Alps with Anna.", "Sounds fun."),
    ("My manager Tom wants the quarterly report by Friday.", "Good luck with it."),
    ("I am learning Spanish because I plan to move to Madrid one day.", "¡Buena suerte!"),
]


def shot(widget: QWidget, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    assert widget.grab().save(str(path)), path
    return path


def assert_nothing_cut(root: QWidget) -> None:
    """Every visible button, check box and one-line label is at least as wide as its text."""
    for w in root.findChildren(QWidget):
        if not w.isVisible() or w.width() == 0 or isinstance(w, ElidedLabel):
            continue
        if isinstance(w, (QAbstractButton, QCheckBox)) or (isinstance(w, QLabel) and not w.wordWrap()
                                                            and w.text() and "<" not in w.text()):
            name = f"{type(w).__name__} “{getattr(w, 'text', lambda: '')()}”"
            assert w.width() >= w.sizeHint().width() - 1, f"{name} is cut: {w.width()} < {w.sizeHint().width()}"
            assert w.height() >= w.sizeHint().height() - 1, f"{name} is squeezed: {w.height()} < {w.sizeHint().height()}"


def texts(tree) -> list[list[str]]:
    return [[tree.topLevelItem(i).text(c) for c in range(tree.columnCount())]
            for i in range(tree.topLevelItemCount())]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One PyGPT host with MemoryPlus, a bank of a few real turns and the Plugins menu."""
    workdir = tmp_path_factory.mktemp("pygpt")
    window = HostWindow(workdir)
    window.ui.menu["menu.plugins"] = QMenu("Plugins")
    plugin = Plugin()
    window.core.config.data.setdefault("plugins", {}).setdefault("memoryplus", {}).update(LOCAL)
    window.register(plugin)
    plugin._ensure_started()
    past = datetime.now(timezone.utc) - timedelta(days=30)
    plugin.client.submit("ingest", {"bank": "default", "turns": [Turn(
        id="pygpt:1:1", user="I live in Berlin and work at Siemens as an engineer.", assistant="Nice!",
        time=past).model_dump(mode="json")]}, timeout=120).result(120)
    for i, (user, answer) in enumerate(TURNS, 2):
        chat_turn(window, user, answer, ctx_id=i)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    yield window, plugin
    ui = plugin.memory_ui
    if ui.browser is not None:
        ui.browser.close()
    plugin.destroy()


@pytest.fixture
def browser(env, qtbot):
    window, plugin = env
    b = plugin.memory_ui.open_browser(bank="default")
    b.resize(1000, 700)
    b.tabs.setCurrentWidget(b.recall)
    qtbot.waitExposed(b)
    return b


@pytest.fixture(autouse=True)
def no_ui_errors(caplog):
    caplog.set_level(logging.WARNING, logger="memoryplus.ui")
    yield
    bad = [r for r in caplog.records if r.name.startswith("memoryplus.ui") and r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


def search(qtbot, b, query: str, as_of: datetime | None = None) -> list[dict]:
    b.tabs.setCurrentWidget(b.recall)
    b.recall.query.setText(query)
    b.recall.as_of_on.setChecked(as_of is not None)
    if as_of is not None:
        from PySide6.QtCore import QDateTime
        b.recall.as_of.setDateTime(QDateTime(as_of.astimezone().replace(tzinfo=None)))
    gen = b.recall._gen
    qtbot.mouseClick(b.recall.search_btn, Qt.MouseButton.LeftButton)
    assert b.recall._gen == gen + 1
    qtbot.waitUntil(lambda: b.recall.status.text().endswith(".") and "Searching" not in b.recall.status.text(),
                    timeout=TIMEOUT_MS)
    return b.recall.visible_results()


# ── the views ─────────────────────────────────────────────────────────────────────────────
def test_every_view_is_populated_from_a_real_bank(env, browser, qtbot):
    window, plugin = env
    b = browser
    assert not b.isModal() and b.windowModality() == Qt.WindowModality.NonModal
    assert "worker ready" in b.status.text() and "local extraction" in b.status.text()

    # Recall: text, validity window, tags, sources
    rows = search(qtbot, b, "where does my sister live")
    assert any("Munich" in r.text for r in rows)
    table = texts(b.recall.tree)
    assert all(row[2].startswith({"fact": ("current since", "superseded on"), "entity": ("known since",),
                                  "turn": ("said on",)}[row[1]]) for row in table), table
    assert any("topic: health, family" in row[3] for row in table), table
    assert any(re.search(r"chat 1, msg \d", row[4]) for row in table), table
    b.recall.tree.topLevelItem(0).setSelected(True)
    assert "from turns" in b.recall.detail.toPlainText()
    shot(b, "recall")
    assert_nothing_cut(b)

    # Timeline: every turn, newest first, with tags; the memories taken from a turn
    b.tabs.setCurrentWidget(b.timeline)
    qtbot.waitUntil(lambda: b.timeline.tree.topLevelItemCount() >= 6, timeout=TIMEOUT_MS)
    rows = b.timeline.rows
    stamps = [r.valid_at for r in rows]
    assert stamps == sorted(stamps, reverse=True)
    assert "Berlin" in rows[-1].text, "the turn from 30 days ago is the oldest"
    dentist = next(i for i, r in enumerate(rows) if "Okafor" in r.text)
    assert "topic: health" in b.timeline.tree.topLevelItem(dentist).text(2)
    b.timeline.tree.topLevelItem(dentist).setSelected(True)
    qtbot.waitUntil(lambda: "Memories from this turn" in b.timeline.detail.toPlainText(), timeout=TIMEOUT_MS)
    assert "Dr Okafor" in b.timeline.detail.toPlainText()
    shot(b, "timeline")
    assert_nothing_cut(b)
    b.timeline.PAGE = 4                       # paging, with pages of 4
    b.timeline.reload()
    qtbot.waitUntil(lambda: b.timeline.tree.topLevelItemCount() == 4, timeout=TIMEOUT_MS)
    assert b.timeline.older.isEnabled() and not b.timeline.newer.isEnabled()
    qtbot.mouseClick(b.timeline.older, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: b.timeline.offset == 4 and b.timeline.tree.topLevelItemCount() == 2, timeout=TIMEOUT_MS)
    assert b.timeline.newer.isEnabled() and not b.timeline.older.isEnabled()
    assert "Berlin" in b.timeline.rows[-1].text and b.timeline.page_label.text().startswith("Turns 5–6")
    del b.timeline.PAGE
    b.timeline.offset = 0

    # Entities & facts: summaries and relations, superseded ones marked
    b.tabs.setCurrentWidget(b.entities)
    qtbot.waitUntil(lambda: b.entities.list.topLevelItemCount() >= 5, timeout=TIMEOUT_MS)
    assert b.entities.select_entity("User")
    rels = texts(b.entities.relations)
    assert any(r[1] == "User lives in Hamburg" and r[2].startswith("current") for r in rels), rels
    assert any(r[1] == "User lives in Berlin" and r[2].startswith("superseded on") for r in rels), rels
    assert "Hamburg" in b.entities.summary.text()
    shot(b, "entities")
    assert_nothing_cut(b)

    # Graph: nodes and labelled edges around an entity, superseded dashed, click to expand
    b.tabs.setCurrentWidget(b.graph)
    qtbot.waitUntil(lambda: b.graph.index is not None, timeout=TIMEOUT_MS)
    b.graph.focus_entity("User")
    g = b.graph
    assert {"User", "Hamburg", "Berlin", "Anna"} <= set(g.nodes)
    edges = [i for i in g.scene.items() if isinstance(i, EdgeItem)]
    berlin = next(e for e in edges if e.fact.text == "User lives in Berlin")
    assert not berlin.fact.current and "until" in berlin.label
    hamburg = next(e for e in edges if e.fact.text == "User lives in Hamburg")
    assert hamburg.fact.current and hamburg.label == "lives in"
    sizes = {n: (item.w, item.h) for n, item in g.nodes.items()}
    assert graph_layout.overlaps({n: (i.pos().x(), i.pos().y()) for n, i in g.nodes.items()}, sizes) == []
    assert "Munich" not in g.nodes
    anna = g.nodes["Anna"]
    qtbot.wait(50)
    point = g.canvas.mapFromScene(anna.scenePos())
    qtbot.mouseClick(g.canvas.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert "Munich" in g.nodes, "clicking Anna expands her neighbours"
    assert g.selected == "Anna" and "Munich" in g.info.toPlainText()
    assert graph_layout.overlaps({n: (i.pos().x(), i.pos().y()) for n, i in g.nodes.items()},
                                 {n: (i.w, i.h) for n, i in g.nodes.items()}) == []
    visible = g.canvas.mapToScene(g.canvas.viewport().rect()).boundingRect()
    for name, item in g.nodes.items():
        assert visible.contains(item.sceneBoundingRect()), f"{name} is outside the picture"
    shot(b, "graph")

    # the graph around a search
    g.query.setText("manager report")
    g.show_query()
    qtbot.waitUntil(lambda: g.status.text().startswith("“manager report”"), timeout=TIMEOUT_MS)
    assert g.nodes["Tom"].seed
    shot(b, "graph-search")


def test_time_travel_shows_what_was_true_then(env, browser, qtbot):
    now = search(qtbot, browser, "where do I live")
    assert any(r.text == "User lives in Hamburg" for r in now)
    assert not any(r.text == "User lives in Berlin" for r in now), "superseded facts are not current"
    then = search(qtbot, browser, "where do I live", as_of=datetime.now(timezone.utc) - timedelta(days=10))
    berlin = next(r for r in then if r.text == "User lives in Berlin")
    assert berlin.invalid_at, "it was true then, and superseded later"
    assert not any(r.text == "User lives in Hamburg" for r in then)
    row = next(r for r in texts(browser.recall.tree) if r[0] == "User lives in Berlin")
    assert row[2].startswith("true then; superseded"), row
    assert " as of " in browser.recall.status.text()
    shot(browser, "recall-as-of")
    browser.recall.as_of_on.setChecked(False)


# ── remember, forget, export ──────────────────────────────────────────────────────────────
def test_remember_then_forget_from_the_browser(env, browser, qtbot, tmp_path):
    window, plugin = env
    b = browser
    b.set_bank("forget-test")
    for text in ("My gym locker code is 4711.", "I drink green tea every morning."):
        b.ask_remember()
        dlg = b.remember_dialog
        assert not dlg.ok_btn.isEnabled()
        dlg.text.setPlainText(text)
        qtbot.mouseClick(dlg.ok_btn, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda t=text: b.message.text().startswith("Remembered") and t[:20] in b.message.text(),
                        timeout=TIMEOUT_MS)

    rows = search(qtbot, b, "locker code")
    hit = next(i for i, r in enumerate(b.recall.visible_results()) if "4711" in r.text)
    b.recall.tree.topLevelItem(hit).setSelected(True)
    assert b.forget_btn.isEnabled()
    qtbot.mouseClick(b.forget_btn, Qt.MouseButton.LeftButton)
    dlg = b.forget_dialog
    assert dlg.isVisible()
    qtbot.waitUntil(lambda: dlg.preview_ready, timeout=TIMEOUT_MS)
    preview = dlg.text.toPlainText()
    assert "This conversation turn will be forgotten" in preview and "typed in" in preview
    assert "4711" in preview, "the turn behind it is shown"
    dlg.resize(640, 460)
    shot(dlg, "forget-dialog")
    qtbot.mouseClick(dlg.forget_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: b.message.text().startswith("Forgot"), timeout=TIMEOUT_MS)
    assert "the 1 conversation turn behind it" in b.message.text()

    rows = search(qtbot, b, "locker code")
    assert not any("4711" in r.text for r in rows), "gone from search"
    out = tmp_path / "forget-test.jsonl"
    op = b.start_export(out)
    qtbot.waitUntil(lambda: op.finished, timeout=TIMEOUT_MS)
    dump = out.read_text(encoding="utf-8")
    assert not mentions_code(dump, "4711"), "gone from the export"
    assert "green tea" in dump, "the other memory stays"
    assert all(json.loads(line) for line in dump.splitlines())
    b.set_bank("default")


# ── feedback ──────────────────────────────────────────────────────────────────────────────
@pytest.mark.option("memory_feedback")
def test_feedback_changes_the_ranking_within_bounds(env, browser, qtbot):
    window, plugin = env
    b = browser
    assert b.up_btn.isVisible() and b.down_btn.isVisible()
    rows = search(qtbot, b, "Anna sister Munich hiking")
    lower = [r for r in rows[1:] if r.kind in ("fact", "entity") and r.score > 0]
    target = lower[-1]
    base = target.score

    def select():
        assert b.recall.select_id(target.id)

    def rate(button, expect: int):
        select()
        assert button.isEnabled()
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: f"rating now {expect:+d}" in b.message.text(), timeout=TIMEOUT_MS)

    def score() -> float:
        rows = search(qtbot, b, "Anna sister Munich hiking")
        return next(r.score for r in rows if r.id == target.id)

    rate(b.up_btn, +1)
    rate(b.up_btn, +2)
    raised = score()
    assert raised == pytest.approx(base * 1.30, abs=2e-6), (base, raised)
    rate(b.up_btn, +2)                       # bounded: a third 👍 changes nothing
    assert score() == pytest.approx(raised, abs=2e-6)
    select()
    shot(b, "recall-rated")
    for expect in (+1, 0, -1, -2):
        rate(b.down_btn, expect)
    assert score() == pytest.approx(base * 0.70, abs=2e-6)
    b.recall.hide_demoted.setChecked(True)
    assert not any(r.id == target.id for r in b.recall.visible_results()), "demoted ones can be hidden"
    assert "demoted hidden" in b.recall.status.text()
    b.recall.hide_demoted.setChecked(False)

    # Memory Feedback off: no 👍/👎 anywhere
    window.save_options(plugin, memory_feedback=False)
    b.update_status()
    assert not b.up_btn.isVisible() and not b.down_btn.isVisible() and not b.recall.hide_demoted.isVisible()
    window.save_options(plugin, memory_feedback=True)
    b.update_status()
    assert b.up_btn.isVisible()


# ── the memory mode: menu, settings, browser header ───────────────────────────────────────
@pytest.mark.option("memory_mode")
def test_mode_selector_round_trip_with_the_settings(env, browser, qtbot):
    window, plugin = env
    ui, b = plugin.memory_ui, browser
    host_menu = window.ui.menu["menu.plugins"]
    assert ui.menu.menuAction() in host_menu.actions()
    assert [a.text() for a in ui.mode_actions.values()] == list(ui.mode_actions)
    assert len(ui.mode_actions) == 9 and all(a.isCheckable() for a in ui.mode_actions.values())
    config_file = Path(window.workdir) / "config.json"

    def saved(mode: str) -> bool:
        on_disk = json.loads(config_file.read_text())["plugins"]["memoryplus"]["memory_mode"]
        return (plugin.get_option_value("memory_mode") == mode and on_disk == mode
                and window.core.config.data["plugins"]["memoryplus"]["memory_mode"] == mode
                and plugin.settings.memory_mode == mode)

    # menu → option → PyGPT config → browser header
    ui.mode_actions["Research"].trigger()
    assert saved("Research")
    assert b.mode_box.currentText() == "Research"
    assert [m for m, a in ui.mode_actions.items() if a.isChecked()] == ["Research"]
    mirror = json.loads((plugin.user_dir() / "settings.json").read_text())
    assert mirror["memory_mode"] == "Research"

    # browser header → option → config → menu
    b.mode_box.setCurrentIndex(b.mode_box.findText("Identity"))
    b.mode_box.activated.emit(b.mode_box.currentIndex())
    assert saved("Identity")
    assert ui.mode_actions["Identity"].isChecked()

    # the settings tab (PyGPT's Save) → menu and header
    window.save_options(plugin, memory_mode="Discourse")
    qtbot.waitUntil(lambda: ui.mode_actions["Discourse"].isChecked() and b.mode_box.currentText() == "Discourse",
                    timeout=5000)
    assert saved("Discourse")

    ui.menu.popup(QPoint(0, 0))
    qtbot.waitExposed(ui.menu)
    assert ui.status_action.text().startswith("MemoryPlus:")
    shot(ui.menu, "menu")
    ui.menu.close()
    ui.mode_actions["Chatbot"].trigger()
    assert saved("Chatbot")


def test_settings_page_button_opens_the_browser(env, qtbot):
    window, plugin = env
    opt = plugin.options["open_browser"]
    assert opt["type"] == "button" and callable(opt["callback"])
    ui = plugin.memory_ui
    if ui.browser is not None:
        ui.browser.hide()
    opt["callback"]()
    assert ui.browser.isVisible()
    window.controller.plugins.save_all()      # PyGPT's own save of every plugin's options
    saved = json.loads((Path(window.workdir) / "config.json").read_text())["plugins"]["memoryplus"]
    assert "open_browser" not in saved and saved["memory_mode"] == plugin.get_option_value("memory_mode")


# ── the queue ─────────────────────────────────────────────────────────────────────────────
def test_queue_view_reflects_the_real_queue(env, browser, qtbot):
    window, plugin = env
    b, q = browser, plugin.queue
    b.tabs.setCurrentWidget(b.queue)
    view = b.queue
    q.pause("paused by the test")
    try:
        for i in range(3):
            assert q.put("default", Turn(id=f"pygpt:9:{i}", user=f"I repainted room {i} in blue.",
                                         assistant="Nice.")) == "queued"
        qtbot.waitUntil(lambda: view.values["pending"].text() == "3", timeout=5000)
        assert view.values["paused"].text() == "paused by the test"
        window.save_options(plugin, queue_size=3)          # full: the next turn is dropped
        assert q.put("default", Turn(id="pygpt:9:3", user="One too many.", assistant="ok")) == "dropped"
        qtbot.waitUntil(lambda: view.values["dropped"].text() == "1", timeout=5000)
        assert texts(view.dropped)[0][1] == "chat 9, msg 3" and "queue full" in texts(view.dropped)[0][3]
        window.process_events(1.1)          # PyGPT's 1-second tick: the status bar
        assert any(s.startswith("MemoryPlus: 3 pending") for s in window.statuses), window.statuses[-3:]
        st = plugin.client.status()
        assert view.values["pid"].text() == str(st["pid"]) and view.values["state"].text() == "ready"
        assert view.values["extraction"].text() == "local"
        assert view.values["rss"].text().endswith("MB") and view.values["uptime"].text() != "—"
        qtbot.waitUntil(lambda: any(r[0] == "default" for r in texts(view.stats)), timeout=TIMEOUT_MS)
        row = next(r for r in texts(view.stats) if r[0] == "default")
        assert int(row[1]) >= 6 and row[4] == "0" and row[5] == "0"
        shot(b, "queue")
        assert_nothing_cut(b)
    finally:
        window.save_options(plugin, queue_size=50)
        q.resume()
    qtbot.waitUntil(lambda: view.values["pending"].text() == "0" and view.values["in_flight"].text() == "0",
                    timeout=TIMEOUT_MS)

    # a turn the worker refuses (a bank name it cannot store) is kept as failed, with Retry
    bad = "bad\x00bank"
    q.put(bad, Turn(id="pygpt:9:99", user="This cannot be stored.", assistant="ok"))
    qtbot.waitUntil(lambda: view.values["failed"].text() == "1", timeout=TIMEOUT_MS)
    assert view.retry_btn.isEnabled()
    assert texts(view.failed)[0][0] == "bad\\x00bank"
    shot(b, "queue-failed")
    qtbot.mouseClick(view.retry_btn, Qt.MouseButton.LeftButton)
    assert "1 failed turn queued again" in b.message.text()
    qtbot.waitUntil(lambda: view.values["failed"].text() == "1", timeout=TIMEOUT_MS)   # refused again
    q.remove(bad, "pygpt:9:99")
    qtbot.waitUntil(lambda: view.values["failed"].text() == "0", timeout=5000)

    # Restart worker: a new worker process, shown in the view
    old_pid = plugin.client.status()["pid"]
    qtbot.mouseClick(view.restart_btn, Qt.MouseButton.LeftButton)
    assert "Restarting the worker" in b.message.text()
    qtbot.waitUntil(lambda: view.values["state"].text() == "ready"
                    and view.values["pid"].text() not in ("—", str(old_pid)), timeout=TIMEOUT_MS)


# ── long operations ───────────────────────────────────────────────────────────────────────
def test_cancelling_long_operations(env, browser, qtbot, tmp_path):
    window, plugin = env
    b = browser

    # export: cancelled at once, no file
    path = tmp_path / "cancelled.jsonl"
    op = b.start_export(path)
    assert b.progress_box.isVisible() and b.cancel_btn.isEnabled()
    qtbot.mouseClick(b.cancel_btn, Qt.MouseButton.LeftButton)
    assert op.finished and not b.progress_box.isVisible()
    assert "Export cancelled: no file was written" in b.message.text()
    qtbot.wait(500)
    assert not path.exists() and not list(tmp_path.glob("*.part"))

    # a full export to import from
    full = tmp_path / "default.jsonl"
    op = b.start_export(full)
    qtbot.waitUntil(lambda: op.finished, timeout=TIMEOUT_MS)
    records = [json.loads(line) for line in full.read_text(encoding="utf-8").splitlines()]
    episodes = sum(r["type"] == "episode" for r in records)
    assert episodes >= 6

    # import in small batches, cancelled after the first: the rest is not imported
    b.set_bank("copy")
    op = b.start_import(full, batch=3)
    qtbot.waitUntil(lambda: op.phase == "importing", timeout=TIMEOUT_MS)
    assert b.progress.maximum() == len(records)
    assert "the batch being written is still merged" in b.op_label.text(), "what Cancel means is shown"
    shot(b, "progress")
    qtbot.mouseClick(b.cancel_btn, Qt.MouseButton.LeftButton)
    assert op.finished and "Import cancelled" in b.message.text() and "merge by id" in b.message.text()
    qtbot.waitUntil(lambda: plugin.client.status()["in_flight"] == 0, timeout=TIMEOUT_MS)  # the batch in flight lands
    stats = plugin.client.submit("stats", {"bank": "copy"}, timeout=30).result(30)
    assert 0 < stats["episodes"] < episodes, stats

    # import to the end
    op = b.start_import(full, batch=50)
    qtbot.waitUntil(lambda: op.finished, timeout=TIMEOUT_MS)
    assert b.message.text().startswith("Imported into copy"), b.message.text()
    stats = plugin.client.submit("stats", {"bank": "copy"}, timeout=30).result(30)
    assert stats["episodes"] == episodes

    # re-embed: Cancel only stops waiting; the worker finishes it
    op = b.start_reembed()
    qtbot.mouseClick(b.cancel_btn, Qt.MouseButton.LeftButton)
    assert "Re-embedding runs to the end" in b.message.text()
    qtbot.mouseClick(b.reembed_btn, Qt.MouseButton.LeftButton)          # asks first
    qtbot.waitUntil(lambda: b.reembed_box is not None and b.reembed_box.isVisible(), timeout=5000)
    b.reembed_box.button(QMessageBox.StandardButton.Ok).click()
    op = b.op
    assert op is not None and op.title == "Re-embed"
    qtbot.waitUntil(lambda: op.finished, timeout=TIMEOUT_MS)
    assert b.message.text().startswith("Re-embedded"), b.message.text()

    # clear: only with the bank's name typed
    b.ask_clear()
    dlg = b.clear_dialog
    assert not dlg.clear_btn.isEnabled()
    dlg.name.setText("cop")
    assert not dlg.clear_btn.isEnabled()
    dlg.name.setText("copy")
    assert dlg.clear_btn.isEnabled()
    shot(dlg, "clear-dialog")
    qtbot.mouseClick(dlg.clear_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: b.message.text().startswith("Bank copy cleared"), timeout=TIMEOUT_MS)
    banks = {x["name"] for x in plugin.client.submit("banks", {}, timeout=30).result(30)}
    assert "copy" not in banks and "default" in banks
    b.set_bank("default")


# ── the review reminder ───────────────────────────────────────────────────────────────────
@pytest.mark.option("review_interval_days")
def test_review_prompt_when_due_and_never_when_off(env, browser, qtbot):
    window, plugin = env
    ui = plugin.memory_ui
    reminder = ui.reminder
    browser.hide()
    last = datetime.now(timezone.utc)
    reminder.state().set_last_review(last)
    chat_turn(window, "I adopted a cat named Miso.", "Lovely!", ctx_id=40)
    assert plugin.queue.flush(timeout=60)
    review_file = plugin.user_dir() / "review.json"
    assert review_file.exists()

    reminder.clock = lambda: last + timedelta(days=3)
    assert not reminder.check(), "not due before the interval (7 days)"
    reminder.clock = lambda: last + timedelta(days=8)
    assert reminder.check()
    qtbot.waitUntil(lambda: reminder.prompt is not None and reminder.prompt.isVisible(), timeout=TIMEOUT_MS)
    prompt = reminder.prompt
    assert not prompt.isModal() and prompt.windowModality() == Qt.WindowModality.NonModal
    assert "1 conversation turn since your last review" in prompt.label.text()
    shot(prompt, "review-prompt")
    qtbot.mouseClick(prompt.review_btn, Qt.MouseButton.LeftButton)
    b = ui.browser
    assert b.isVisible() and b.tabs.currentWidget() is b.timeline
    qtbot.waitUntil(lambda: b.timeline.tree.topLevelItemCount() == 1, timeout=TIMEOUT_MS)
    assert "Miso" in b.timeline.rows[0].text and b.timeline.banner_box.isVisible()
    shot(b, "review-timeline")
    assert reminder.state().last_review() == last + timedelta(days=8)
    qtbot.mouseClick(b.timeline.show_all, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: b.timeline.tree.topLevelItemCount() >= 7, timeout=TIMEOUT_MS)

    # "Later" snoozes for a day
    reminder.state().set_last_review(last)
    assert reminder.check()
    qtbot.waitUntil(lambda: reminder.prompt.isVisible(), timeout=TIMEOUT_MS)
    qtbot.mouseClick(reminder.prompt.later_btn, Qt.MouseButton.LeftButton)
    assert not reminder.due(last + timedelta(days=8, hours=12))
    assert reminder.due(last + timedelta(days=9, hours=1))

    # interval 0: never
    window.save_options(plugin, review_interval_days=0)
    try:
        reminder.state().set_last_review(last - timedelta(days=400))
        reminder.prompt = None
        assert not reminder.check()
        qtbot.wait(300)
        assert reminder.prompt is None
    finally:
        window.save_options(plugin, review_interval_days=7)


def test_the_ui_never_waits_on_the_worker_on_the_gui_thread():
    """The UI only submits (a Future at once); a result is read only from a done Future."""
    for path in UI_DIR.glob("*.py"):
        src = path.read_text(encoding="utf-8")
        assert ".call(" not in src, f"{path.name}: a blocking client.call"
        calls = [m.start() for m in re.finditer(r"\.result\(", src)]
        allowed = src.find("def outcome(")
        for pos in calls:
            assert path.name == "common.py" and allowed < pos < allowed + 600, \
                f"{path.name}: Future.result() outside outcome()"


def test_the_ui_of_a_plugin_that_is_not_running(tmp_path, qtbot):
    """Registered but not enabled: the menu and the browser are there, and say so."""
    window = HostWindow(tmp_path / "off")
    window.ui.menu["menu.plugins"] = QMenu("Plugins")
    plugin = window.register(Plugin(), enable=False)
    try:
        ui = plugin.memory_ui
        assert plugin.client is None and ui.menu.menuAction() in window.ui.menu["menu.plugins"].actions()
        ui._menu_showing()
        assert ui.status_action.text().startswith("MemoryPlus is off")
        b = ui.open_browser()
        b.recall.query.setText("anything")
        b.recall.search()
        assert "not running" in b.recall.status.text()
        for view in (b.timeline, b.entities, b.graph, b.queue):
            b.tabs.setCurrentWidget(view)
        assert b.queue.values["state"].text() == "not running"
        assert not b.forget_btn.isEnabled()
        ui.mode_actions["Assistant"].trigger()          # the mode can still be chosen
        assert plugin.get_option_value("memory_mode") == "Assistant"
        assert window.core.config.data["plugins"]["memoryplus"]["memory_mode"] == "Assistant"
        b.close()
    finally:
        plugin.destroy()
