"""The chat commands /remember_this and /forget_that, parsed from what the user sent."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_COMMAND = re.compile(r"^\s*/(remember_this|forget_that)\b(.*)$", re.S | re.I)
_OTHER = re.compile(r"^\s*/(remember|forget)\w*\b", re.I)


@dataclass
class Command:
    name: str                       # remember, forget, confirm, invalid
    text: str = ""
    keep: list[int] = field(default_factory=list)   # /forget_that keep 2 3: numbers to keep
    only: list[int] = field(default_factory=list)   # /forget_that 1 3: forget just these
    error: str = ""


def parse(value: str) -> Command | None:
    """A command, or None when the message is an ordinary one."""
    if not value or "/" not in value[:40]:
        return None
    m = _COMMAND.match(value)
    if m is None:
        if _OTHER.match(value):
            word = value.strip().split()[0]
            return Command("invalid", error=f"unknown command {word}: use /remember_this [text] "
                                             "or /forget_that [text]")
        return None
    name, rest = m.group(1).lower(), m.group(2).strip()
    if name == "remember_this":
        return Command("remember", text=rest)
    low = rest.lower()
    if low in ("yes", "y", "confirm"):
        return Command("confirm")
    if low in ("no", "n", "cancel"):
        return Command("cancel")
    if low.startswith("keep"):
        numbers = re.findall(r"\d+", low)
        if not numbers or re.sub(r"[\d\s,]", "", low[4:]):
            return Command("invalid", error="use /forget_that keep 1 3 to keep memories 1 and 3")
        return Command("confirm", keep=[int(n) for n in numbers])
    if re.fullmatch(r"[\d\s,]+", low):
        return Command("confirm", only=[int(n) for n in re.findall(r"\d+", low)])
    return Command("forget", text=rest)
