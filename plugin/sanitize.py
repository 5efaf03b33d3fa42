"""Sanitization of a chat turn's text before it is stored as a memory.

`Sanitizer(settings).clean(text)` removes, in this order:

1. lone UTF-16 surrogates (a valid high+low pair is joined into its character), NUL and the
   other control characters (C0 except tab/newline, DEL, C1), the invisible bidi *override*
   controls U+202A–U+202E / U+2066–U+2069 (they can reorder how stored text reads; RTL text
   itself needs none of them, and LRM/RLM are kept) and stray BOMs; every line break
   (CR LF, CR, U+2028/U+2029, NEL, VT, FF) becomes LF;
2. tool-call blocks, when `sanitize_tool_calls`: PyGPT 2.9.1's markup
   `<tool>{"cmd": …, "params": {…}}</tool>` (``core/command/command.py``; a `<tool>{…` cut off
   at the end of a stopped stream is removed to the end too), its legacy `~###~{…}~###~`, the
   CodeAct agent's `<execute>…</execute>`, and the forms other models emit:
   `<tool_code>`, `<tool_call>`, `<tool_calls>`, `<function_call>`, `<function_calls>`,
   `<tool_use>`, `<tool_result>`, `<tool_response>` (with or without attributes). Like PyGPT's
   own detector, `<tool>` counts only with a JSON body, so "<tool>" mentioned in prose stays.
   Removal repeats until nothing more goes (removing a block can join its neighbours into one);
3. markdown code fences (``` and ~~~, any indentation, CommonMark closing rules, an unclosed
   fence runs to the end), when `sanitize_code_blocks`; with `preserve_tagged_code`, a block
   tagged ``[KEEP_CODE]`` on its fence line or on the nearest non-blank line before it is kept
   verbatim (tool markup inside it included) and only the tag is removed;
4. matches of the custom rules (`custom_sanitization_rules`: regular expressions separated by
   ``;`` — write ``\\;`` for a literal semicolon inside a rule; blanks around a rule are
   ignored). Every rule that does not compile is listed in `problems` with its text and the
   regex error. Rules run with the `regex` package's timeout (`RULE_TIMEOUT_S` per rule and
   text), so a catastrophically backtracking rule cannot hang ingestion: a rule that times
   out is not applied to that text and is reported in `problems`;
5. whitespace: outside code blocks every run of spaces/tabs/Unicode spaces becomes one
   space, lines are trimmed, at most one blank line is kept; inside kept code blocks only
   trailing blanks go (indentation matters there).

`clean()` never raises on any input and each pass is linear in the text's length (a short turn
takes tens of microseconds; 1 MB of prose about 30 ms, 1 MB dense with tool calls and fences
about 0.25 s — plus up to `RULE_TIMEOUT_S` per custom rule, so call it off the GUI thread when
custom rules are set). Max Memory Length is applied by the engine, not here.
"""
from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

try:  # the `regex` package (a dependency of tiktoken, hence of pygpt-net) supports timeouts
    import regex as _regex
except ImportError:  # pragma: no cover - exercised only where `regex` is missing
    _regex = None

log = logging.getLogger(__name__)

# Longest time one custom rule may run on one text.
RULE_TIMEOUT_S = 0.25
# Without the `regex` package (not expected: tiktoken, hence pygpt-net, depends on it) rules
# run line by line on lines up to this length: a mitigation, not a hard time bound.
FALLBACK_LINE_CAP = 4000
# Most passes of tool-call removal (a removal can expose a new call around it).
MAX_TOOL_PASSES = 16
# Most distinct runtime problems remembered (rule timeouts); static ones are always kept.
MAX_PROBLEMS = 50

KEEP_CODE_TAG = "[KEEP_CODE]"
_KEEP_RE = re.compile(r"\[\s*KEEP[_ ]CODE\s*\]", re.IGNORECASE)

# ── step 1: characters ─────────────────────────────────────────────────────────────────
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LINE_BREAKS = re.compile("\r\n|[\r\u2028\u2029\x85\x0b\x0c]")
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\u202a-\u202e\u2066-\u2069\ufeff\ufffe\uffff]")


def _join_pair(m: re.Match) -> str:
    hi, lo = m.group(0)
    return chr(0x10000 + ((ord(hi) - 0xD800) << 10) + (ord(lo) - 0xDC00))


def clean_characters(text: str) -> str:
    """Step 1 alone: surrogates, control characters, line breaks."""
    if _SURROGATE.search(text):
        text = _SURROGATE_PAIR.sub(_join_pair, text)
        text = _SURROGATE.sub("", text)
    text = _LINE_BREAKS.sub("\n", text)
    return _CONTROL.sub("", text)


# ── step 2: tool calls ─────────────────────────────────────────────────────────────────
TOOL_TAGS = ("tool", "tool_code", "tool_call", "tool_calls", "function_call", "function_calls",
             "tool_use", "tool_result", "tool_response", "execute")
_NAMES = "|".join(sorted(TOOL_TAGS, key=len, reverse=True))
_CALL_TOKEN = re.compile(
    r"<(?P<open>" + _NAMES + r")(?:\s[^<>]*)?>|</(?P<close>" + _NAMES + r")\s*>|~###~", re.IGNORECASE)
_TOOL_CLOSE = {name: re.compile(r"</" + name + r"\s*>", re.IGNORECASE) for name in TOOL_TAGS}
_LEGACY_MARK = "~###~"


def _inside(pos: int, spans: list[tuple[int, int]]) -> tuple[int, int] | None:
    for start, end in spans:
        if start <= pos < end:
            return start, end
    return None


def strip_tool_calls(text: str, protected: list[tuple[int, int]] | tuple = ()) -> str:
    """Remove tool-call blocks, except those starting inside a protected span.

    One left-to-right pass, linear in len(text). `<tool>` counts only with a JSON body (as
    PyGPT's own `_RE_CMD_PRESENCE`), so "<tool>" mentioned in prose stays."""
    out: list[str] = []
    pos = search = 0
    unclosed: set[str] = set()   # tags with no closing tag after some point: stop looking
    legacy_unclosed = False
    n = len(text)
    while True:
        m = _CALL_TOKEN.search(text, search)
        if not m:
            break
        span = _inside(m.start(), protected) if protected else None
        if span:
            search = span[1]
            continue
        name = m.group("open")
        if name:
            name = name.lower()
            if name == "tool" and not text[m.end():m.end() + 200].lstrip().startswith("{"):
                search = m.end()    # "<tool>" mentioned in prose, not PyGPT's JSON call
                continue
            close = None if name in unclosed else _TOOL_CLOSE[name].search(text, m.end())
            if close is not None:
                out.append(text[pos:m.start()])
                out.append(" ")
                pos = search = close.end()
                continue
            unclosed.add(name)
            if name == "tool":
                # A call cut off by a stopped stream: still markup, removed to the end.
                out.append(text[pos:m.start()])
                pos = n
                break
            search = m.end()
            continue
        if m.group("close"):      # a closing tag with no opening one: left as it is (prose)
            search = m.end()
            continue
        end = -1 if legacy_unclosed else text.find(_LEGACY_MARK, m.end())
        if end < 0:
            legacy_unclosed = True
            search = m.end()
            continue
        body = text[m.end():end].strip()
        if body.startswith("{") and body.endswith("}"):
            out.append(text[pos:m.start()])
            out.append(" ")
            pos = search = end + len(_LEGACY_MARK)
        else:
            search = m.end()
    out.append(text[pos:])
    return "".join(out)


# ── step 3: code fences ────────────────────────────────────────────────────────────────
_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")


@dataclass
class _Block:
    kind: str            # "prose" | "code"
    lines: list[str]
    keep: bool = True


def _is_close(line: str, fence: str) -> bool:
    s = line.strip()
    return len(s) >= len(fence) and s == fence[0] * len(s)


def split_fences(text: str, *, tag_aware: bool) -> list[_Block]:
    """Prose and fenced-code blocks, in order. A code block's `keep` says it is tagged
    [KEEP_CODE] (the tag is removed from its fence line or the line before) when tag_aware."""
    lines = text.split("\n")
    blocks: list[_Block] = []
    prose: list[str] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        m = _FENCE_OPEN.fullmatch(line) if ("`" in line or "~" in line) else None
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = m.group(1)
            j = i + 1
            while j < n and not _is_close(lines[j], fence):
                j += 1
            block = lines[i:j + 1]          # an unclosed fence runs to the end
            tagged = False
            if tag_aware:
                if _KEEP_RE.search(block[0]):
                    tagged = True
                    block[0] = _KEEP_RE.sub("", block[0]).rstrip()
                else:
                    k = len(prose) - 1
                    while k >= 0 and not prose[k].strip():
                        k -= 1
                    if k >= 0 and _KEEP_RE.search(prose[k]):
                        tagged = True
                        rest = _KEEP_RE.sub("", prose[k])
                        if rest.strip():
                            prose[k] = rest
                        else:
                            del prose[k]
            if prose:
                blocks.append(_Block("prose", prose))
                prose = []
            blocks.append(_Block("code", block, keep=tagged))
            i = j + 1
        else:
            prose.append(line)
            i += 1
    if prose:
        blocks.append(_Block("prose", prose))
    return blocks


def _kept_code_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the fenced blocks tagged [KEEP_CODE] in `text` (tags still in place)."""
    spans: list[tuple[int, int]] = []
    offset = 0
    lines = text.split("\n")
    starts = []
    for line in lines:
        starts.append(offset)
        offset += len(line) + 1
    i, n = 0, len(lines)
    last_nonblank = -1
    while i < n:
        line = lines[i]
        m = _FENCE_OPEN.fullmatch(line) if ("`" in line or "~" in line) else None
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            j = i + 1
            while j < n and not _is_close(lines[j], m.group(1)):
                j += 1
            tagged = bool(_KEEP_RE.search(line)) or (
                last_nonblank >= 0 and bool(_KEEP_RE.search(lines[last_nonblank])))
            if tagged:
                end = starts[j] + len(lines[j]) if j < n else len(text)
                spans.append((starts[i], end))
            i = j + 1
            last_nonblank = -1
        else:
            if line.strip():
                last_nonblank = i
            i += 1
    return spans


def _normalise_prose(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        line = " ".join(line.split())
        if line or (out and out[-1]):
            out.append(line)
    return out


def _assemble(blocks: list[_Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if block.kind == "code":
            if not block.keep:
                if out and out[-1]:
                    out.append("")
                continue
            if out and out[-1]:
                out.append("")       # a kept block stands apart from the prose around it
            out.extend(line.rstrip() for line in block.lines)
            out.append("")
        else:
            for line in _normalise_prose(block.lines):
                if not line and (not out or not out[-1]):
                    continue
                out.append(line)
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return "\n".join(out)


# ── step 4: custom rules ───────────────────────────────────────────────────────────────

def split_rules(spec: str) -> list[str]:
    """Rules separated by `;`; a `;` preceded by an odd number of backslashes belongs to the rule."""
    rules: list[str] = []
    current: list[str] = []
    backslashes = 0
    for ch in spec or "":
        if ch == ";" and backslashes % 2 == 0:
            rules.append("".join(current))
            current = []
            backslashes = 0
            continue
        current.append(ch)
        backslashes = backslashes + 1 if ch == "\\" else 0
    rules.append("".join(current))
    return [r.strip() for r in rules if r.strip()]


@dataclass
class _Rule:
    index: int
    text: str
    pattern: Any


class Sanitizer:
    """Cleans a turn's text as the Sanitization and Advanced settings say.

    `problems` lists every custom rule that does not compile (with the regex error) and every
    rule that timed out on some text. Thread-safe: one instance may clean from several threads.
    """

    def __init__(self, settings: Any):
        self.sanitize_tool_calls = bool(settings.sanitize_tool_calls)
        self.sanitize_code_blocks = bool(settings.sanitize_code_blocks)
        self.preserve_tagged_code = bool(settings.preserve_tagged_code)
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._timed_out: set[int] = set()
        self.rules: list[_Rule] = []
        for i, text in enumerate(split_rules(settings.custom_sanitization_rules), start=1):
            try:
                if _regex is not None:
                    pattern = _regex.compile(text, flags=_regex.V0)
                else:  # pragma: no cover
                    pattern = re.compile(text)
            except Exception as exc:  # regex.error / re.error / RecursionError / ValueError...
                self.problems.append(
                    f"custom sanitization rule {i} {text!r} is invalid and is not applied: {exc}")
                continue
            self.rules.append(_Rule(i, text, pattern))

    # ── public ──────────────────────────────────────────────────────────────────────────
    def clean(self, text: Any) -> str:
        """The sanitized text; never raises."""
        try:
            text = self._as_str(text)
            return self._clean(text)
        except Exception as exc:  # defensive: a bug here must never lose the turn or the GUI
            log.exception("sanitizer failed; storing the character-cleaned text")
            self._problem(f"sanitizer error ({type(exc).__name__}); only control characters were removed")
            try:
                return " ".join(clean_characters(self._as_str(text)).split())
            except Exception:
                return ""

    # ── steps ────────────────────────────────────────────────────────────────────────────
    @staticmethod
    def _as_str(text: Any) -> str:
        if text is None:
            return ""
        if isinstance(text, str):
            return text
        if isinstance(text, (bytes, bytearray, memoryview)):
            return bytes(text).decode("utf-8", errors="replace")
        return str(text)

    def _clean(self, text: str) -> str:
        text = clean_characters(text)
        tag_aware = self.preserve_tagged_code
        if self.sanitize_tool_calls:
            # Removing a block can join its neighbours into a new one ("<tool>" + "{"):
            # repeat until nothing more goes (each pass is linear; nesting is shallow).
            for _ in range(MAX_TOOL_PASSES):
                stripped = strip_tool_calls(text, _kept_code_spans(text) if tag_aware else ())
                if stripped == text:
                    break
                text = stripped
        blocks = split_fences(text, tag_aware=tag_aware)
        for block in blocks:
            if block.kind == "code" and not self.sanitize_code_blocks:
                block.keep = True
        if self.rules:
            blocks = self._apply_rules(blocks)
        return _assemble(blocks)

    def _apply_rules(self, blocks: list[_Block]) -> list[_Block]:
        # Rules see the text as it will be stored (removed code blocks are already gone), then
        # the fences are found again: a rule may have changed them.
        text = "\n".join("\n".join(b.lines) if b.kind == "prose" or b.keep else ""
                         for b in blocks)
        for rule in self.rules:
            text = self._apply_rule(rule, text)
        blocks = split_fences(text, tag_aware=False)
        for block in blocks:
            block.keep = True
        return blocks

    def _apply_rule(self, rule: _Rule, text: str) -> str:
        if _regex is not None:
            try:
                return rule.pattern.sub("", text, timeout=RULE_TIMEOUT_S)
            except TimeoutError:
                self._timeout(rule, len(text))
                return text
            except Exception as exc:
                self._problem(f"custom sanitization rule {rule.index} {rule.text!r} failed: {exc}")
                return text
        lines = text.split("\n")  # pragma: no cover - fallback without `regex`
        for k, line in enumerate(lines):  # pragma: no cover
            if len(line) > FALLBACK_LINE_CAP:
                self._timeout(rule, len(line))
                continue
            lines[k] = rule.pattern.sub("", line)
        return "\n".join(lines)  # pragma: no cover

    def _timeout(self, rule: _Rule, size: int) -> None:
        with self._lock:
            if rule.index in self._timed_out:
                return
            self._timed_out.add(rule.index)
        self._problem(f"custom sanitization rule {rule.index} {rule.text!r} took longer than "
                      f"{RULE_TIMEOUT_S:g} s on a {size:,}-character text and was not applied to it "
                      f"(it backtracks catastrophically; simplify it)")

    def _problem(self, message: str) -> None:
        with self._lock:
            if message not in self.problems and len(self.problems) < MAX_PROBLEMS:
                self.problems.append(message)
        log.warning("%s", message)
