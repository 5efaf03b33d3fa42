"""Sanitization of turns before storing: tool calls, code fences, [KEEP_CODE], custom rules,
hostile characters. Tool-call markup is produced by PyGPT 2.9.1's own Command core."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from memoryplus.config.schema import Settings
from memoryplus.plugin.sanitize import RULE_TIMEOUT_S, Sanitizer, split_rules

pygpt_command = pytest.importorskip("pygpt_net.core.command.command")


def make(**values) -> Sanitizer:
    return Sanitizer(Settings(**values))


# ── tool calls ─────────────────────────────────────────────────────────────────────────

@pytest.mark.option("sanitize_tool_calls")
def test_pygpt_tool_calls_are_stripped_as_pygpt_writes_them():
    cmd = pygpt_command.Command()
    calls = cmd.pack_cmds([{"cmd": "web_search", "params": {"query": "weather in Paris"}},
                           {"cmd": "read_file", "params": {"path": "/home/me/notes.txt"}}])
    text = f"Let me check the weather for you. {calls}"
    assert cmd.has_cmds(text)
    out = make().clean(text)
    assert out == "Let me check the weather for you."
    assert not cmd.has_cmds(out)
    # as PyGPT appends native tool calls to ctx.output (append_tool_calls)
    out = make().clean("It is sunny.\n" + calls + "\nAnything else?")
    assert out == "It is sunny.\n\nAnything else?"


@pytest.mark.option("sanitize_tool_calls")
def test_other_tool_call_formats():
    s = make()
    text = ('A ~###~{"cmd": "image", "params": {"query": "a cat"}}~###~ B\n'
            "C <tool_code>print(search('x'))</tool_code> D\n"
            'E <function_call name="lookup">{"q": 1}</function_call> F\n'
            "G <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call> H\n"
            "I <execute>\nimport math\nprint(math.pi)\n</execute> J\n"
            "K <TOOL_CODE>x</TOOL_CODE> L\n"
            "M <tool>\n{ \"cmd\": \"fetch_weather\", \"params\": {\"location\": \"Warsaw\"} }\n</tool> N")
    assert s.clean(text) == "A B\nC D\nE F\nG H\nI J\nK L\nM N"


@pytest.mark.option("sanitize_tool_calls")
def test_truncated_tool_call_and_prose_mentions():
    s = make()
    # a stream stopped in the middle of a call: the rest is markup
    assert s.clean('Searching now. <tool>{"cmd": "web_search", "params": {"qu') == "Searching now."
    # "<tool>" talked about in prose is not a call (PyGPT needs a JSON body too)
    assert s.clean("Wrap calls in <tool> tags, closed by </tool>.") == \
        "Wrap calls in <tool> tags, closed by </tool>."
    # an unmatched legacy marker stays
    assert s.clean("price ~###~ is odd") == "price ~###~ is odd"


@pytest.mark.option("sanitize_tool_calls")
def test_tool_calls_kept_when_option_off():
    text = 'Done. <tool>{"cmd":"x","params":{}}</tool>'
    assert make(sanitize_tool_calls=False).clean(text) == text


# ── code fences and [KEEP_CODE] ───────────────────────────────────────────────────────

FENCED = """Here is the script:
```python
def f():
    return 1
```
And a tilde block:
~~~
rm -rf build
~~~
That's all."""


@pytest.mark.option("sanitize_code_blocks")
def test_code_fences_stripped():
    assert make().clean(FENCED) == "Here is the script:\n\nAnd a tilde block:\n\nThat's all."


@pytest.mark.option("sanitize_code_blocks")
def test_code_fences_kept_verbatim_when_option_off():
    out = make(sanitize_code_blocks=False).clean(FENCED)
    assert "def f():\n    return 1" in out           # indentation inside code is kept
    assert "~~~\nrm -rf build\n~~~" in out


@pytest.mark.option("sanitize_code_blocks")
def test_fence_edge_cases():
    s = make()
    # a longer fence is closed only by one at least as long; an unclosed fence runs to the end
    assert s.clean("a\n````\n```\nstill code\n````\nb") == "a\n\nb"
    assert s.clean("a\n```\nnever closed\nmore") == "a"
    # indented fence inside a list item
    assert s.clean("1. step\n   ```bash\n   make\n   ```\n2. next") == "1. step\n\n2. next"
    # inline triple backticks are not a fence
    assert s.clean("use ```x``` inline") == "use ```x``` inline"


@pytest.mark.option("preserve_tagged_code")
def test_keep_code_tag_on_fence_line_and_line_before():
    text = ("Config [KEEP_CODE]:\n```yaml\nport: 8080\n```\n"
            "Scratch:\n```\ntmp = 1\n```\n"
            "```python [KEEP_CODE]\nimport os\n    x = 1\n```\n"
            "[keep_code]\n\n~~~\nls  -la\n~~~\nend")
    out = make().clean(text)
    assert "```yaml\nport: 8080\n```" in out
    assert "```python\nimport os\n    x = 1\n```" in out
    assert "~~~\nls  -la\n~~~" in out                    # whitespace inside kept code untouched
    assert "tmp = 1" not in out
    assert "KEEP_CODE" not in out.upper()
    assert out.startswith("Config :") or out.startswith("Config:")


@pytest.mark.option("preserve_tagged_code")
def test_keep_code_off_strips_tagged_blocks_too():
    out = make(preserve_tagged_code=False).clean("x\n```py [KEEP_CODE]\nsecret()\n```\ny")
    assert "secret" not in out and out.startswith("x") and out.endswith("y")


@pytest.mark.option("preserve_tagged_code")
def test_tool_markup_inside_kept_code_stays():
    text = ('How to call a tool [KEEP_CODE]\n```\n<tool>{"cmd": "x", "params": {}}</tool>\n```\n'
            'Now: <tool>{"cmd": "y", "params": {}}</tool>')
    out = make().clean(text)
    assert '<tool>{"cmd": "x", "params": {}}</tool>' in out
    assert '"y"' not in out


# ── custom rules ──────────────────────────────────────────────────────────────────────

@pytest.mark.option("custom_sanitization_rules")
def test_custom_rules_remove_matches_and_report_invalid_ones():
    s = make(custom_sanitization_rules=r"sk-[A-Za-z0-9]{8,}; (unclosed ; [z-a] ;\d{3}-\d{4}; a\;b")
    assert len(s.problems) == 2
    assert "(unclosed" in s.problems[0] and "missing )" in s.problems[0]
    assert "[z-a]" in s.problems[1] and "range" in s.problems[1]
    out = s.clean("my key is sk-ABCDEF123456 and my number 555-1234; also a;b here")
    assert out == "my key is and my number ; also here"


def test_rule_splitting():
    assert split_rules(r" a ; b\;c ;; \\;d ") == ["a", r"b\;c", "\\\\", "d"]
    assert split_rules("") == []


@pytest.mark.option("custom_sanitization_rules")
def test_pathological_rule_is_time_bounded_and_reported():
    s = make(custom_sanitization_rules=r"(x+x+)+y;secret")
    text = "x" * 20000 + " secret"
    t0 = time.monotonic()
    out = s.clean(text)
    elapsed = time.monotonic() - t0
    assert elapsed < RULE_TIMEOUT_S + 5         # bounded (unbounded: ~2^20000 steps)
    assert out == "x" * 20000                            # the other rule still applied
    assert any("(x+x+)+y" in p and "longer than" in p for p in s.problems)
    s.clean(text)                                         # reported once, not per turn
    assert sum("longer than" in p for p in s.problems) == 1


# ── characters, size, never raising ───────────────────────────────────────────────────

def test_control_characters_surrogates_and_line_breaks():
    s = make()
    text = "a\x00b\x07c\x1b[31md\x7f\x85e\r\nf\rg\u2028h\ufeffi\u202eevil\u202c"
    assert s.clean(text) == "abc[31md\ne\nf\ng\nhievil"
    # a lone surrogate goes, a split pair becomes its character
    assert s.clean("x\ud800y \ud83d\ude00 z\udfff") == "xy \U0001F600 z"
    out = s.clean("\ud83d")
    out.encode("utf-8")                                   # storable


def test_rtl_emoji_and_whitespace():
    s = make()
    hebrew = "שלום, מה שלומך?"
    arabic = "مرحبا بالعالم"
    family = "👨\u200d👩\u200d👧"                          # ZWJ sequence survives
    out = s.clean(f"  {hebrew}\t\t {arabic}\u00a0\u00a0{family}  \n\n\n\nnext   line  ")
    assert out == f"{hebrew} {arabic} {family}\n\nnext line"
    assert s.clean("\u200fRLM kept") == "\u200fRLM kept"


def test_one_megabyte_and_binary_looking_input():
    s = make(custom_sanitization_rules=r"password=\S+")
    big = ("Some prose with password=hunter2 and a call <tool>{\"cmd\":\"x\"}</tool>.\n"
           "```\ncode\n```\n") * 12100
    assert len(big) > 1_000_000
    t0 = time.monotonic()
    out = s.clean(big)
    assert time.monotonic() - t0 < 10
    assert "hunter2" not in out and "<tool>" not in out and "code" not in out
    binary = bytes(range(256)).decode("latin-1") * 4000
    out = s.clean(binary)
    assert "\x00" not in out and "\x9f" not in out
    # pathological for naive regexes: many unclosed openers
    assert s.clean("<tool_code>" * 50000)
    assert s.clean("<tool>{" * 50000) == ""
    assert s.clean("```\n" * 50000) == ""
    assert s.clean(None) == "" and s.clean(b"caf\xc3\xa9") == "café" and s.clean(42) == "42"


@hsettings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=400)
       | st.lists(st.sampled_from(["<tool>", "</tool>", "{", "}", "```", "~~~", "\n", "[KEEP_CODE]",
                                   "~###~", "<execute>", "</execute>", " ", "x", "\ud800", "\r"]),
                  max_size=60).map("".join))
def test_never_raises_and_output_is_storable(text):
    keep_all = make(sanitize_code_blocks=False, preserve_tagged_code=False)
    for s in (make(), keep_all, make(custom_sanitization_rules=r"x+;\s{2,};(a|aa)+$")):
        out = s.clean(text)
        assert isinstance(out, str)
        out.encode("utf-8")
        assert "\x00" not in out and "\r" not in out
    out = keep_all.clean(text)
    assert keep_all.clean(out) == out                   # cleaning twice changes nothing more
