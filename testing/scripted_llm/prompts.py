"""Reading graphiti's prompts: tagged sections, JSON / Python-repr literals, times."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from memoryplus.common.isodates import parse_iso

def _section(prompt: str, tag: str) -> str | None:
    """Content between <TAG> and the next </TAG> (first occurrence)."""
    open_tag, close_tag = f'<{tag}>', f'</{tag}>'
    i = prompt.find(open_tag)
    if i < 0:
        return None
    j = prompt.find(close_tag, i + len(open_tag))
    if j < 0:
        return prompt[i + len(open_tag) :].strip()
    return prompt[i + len(open_tag) : j].strip()


def _parse_literal(text: str | None) -> Any:
    """Parse a JSON or Python-repr literal (graphiti uses both in its prompts)."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _json_values(text: str | None) -> list[Any]:
    """All JSON values written one after another in a section (e.g. <MESSAGES>)."""
    out: list[Any] = []
    if not text:
        return out
    dec = json.JSONDecoder()
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            val, j = dec.raw_decode(text, i)
        except ValueError:
            out.append(text[i:])
            break
        out.append(val)
        i = j
    return out


def _texts_from_values(values: Iterable[Any]) -> list[str]:
    texts: list[str] = []
    for v in values:
        if isinstance(v, str):
            texts.append(v)
        elif isinstance(v, dict):
            for key in ('content', 'episode_body', 'text', 'fact'):
                if isinstance(v.get(key), str):
                    texts.append(v[key])
                    break
        elif isinstance(v, list):
            texts.extend(_texts_from_values(v))
    return texts


def _iso_z(dt: datetime) -> str:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).isoformat().replace('+00:00', 'Z')


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    m = re.search(r'\d{4}-\d{2}-\d{2}(?:[T ][0-9:.]+)?(?:Z|[+-]\d{2}:?\d{2})?', text)
    if not m:
        return None
    try:
        return parse_iso(m.group())
    except ValueError:
        return None


# --------------------------------------------------------------------------------------
# Conversation parsing and the extraction heuristics
