"""ISO 8601 date strings, read the same on every Python MemoryPlus runs on.

Python 3.11 taught `datetime.fromisoformat` most of ISO 8601 (a trailing `Z`, basic forms such as
`20250131T1030`, week dates, `+05` offsets, any number of fraction digits); 3.10 (the Python of
PyGPT's AppImage) reads only what `isoformat()` writes. Every date string from users, files or the
wire goes through `parse_iso`, so a date one PyGPT build accepts is accepted by all of them.
"""
from __future__ import annotations

import re
import sys
from datetime import date, datetime, timedelta, timezone

__all__ = ["parse_iso"]

# The date forms: calendar dates and week dates (the weekday optional), extended or basic.
_DATE = re.compile(r"(?P<y>[0-9]{4})(?:-(?P<m>[0-9]{2})-(?P<d>[0-9]{2})|(?P<bm>[0-9]{2})(?P<bd>[0-9]{2})"
                   r"|-W(?P<w>[0-9]{2})(?:-(?P<wd>[0-9]))?|W(?P<bw>[0-9]{2})(?P<bwd>[0-9])?)")
_DIGITS = frozenset("0123456789")
# hh[:mm[:ss]] or hh[mm[ss]], then an optional fraction (`.` or `,`) of the last part given,
# which 3.11 reads as a fraction of a second whatever that part is.
_CLOCK = re.compile(r"(?P<h>[0-9]{2})(?:(?P<sep>:?)(?P<m>[0-9]{2})(?:(?P=sep)(?P<s>[0-9]{2}))?)?"
                    r"(?:[.,](?P<f>[0-9]+))?")


def parse_iso(text: str) -> datetime:
    """The datetime `text` names, as Python 3.11+'s `datetime.fromisoformat` reads it (a date
    alone is midnight; no offset gives a naive datetime). ValueError when it is not one."""
    if not isinstance(text, str):
        raise TypeError(f"an ISO 8601 date must be a string, not {type(text).__name__}")
    if sys.version_info >= (3, 11):
        return datetime.fromisoformat(text)
    return _parse(text)


def _invalid(text: str) -> ValueError:
    return ValueError(f"Invalid isoformat string: {text!r}")


def _parse(text: str) -> datetime:
    """3.11's reading, for the Pythons whose fromisoformat is narrower."""
    length = _date_length(text)
    m = _DATE.fullmatch(text, 0, length)
    if not m:
        raise _invalid(text)
    year, week = int(m["y"]), m["w"] or m["bw"]
    try:
        if week:  # the weekday defaults to Monday
            day = date.fromisocalendar(year, int(week), int(m["wd"] or m["bwd"] or 1))
        else:
            day = date(year, int(m["m"] or m["bm"]), int(m["d"] or m["bd"]))
    except ValueError:
        raise _invalid(text) from None
    rest = text[length:]
    if not rest:
        return datetime(day.year, day.month, day.day)
    # One separator of any kind (3.11 takes any character in place of `T`), then the time.
    (h, mi, s, us), tzinfo = _time(rest[1:], text)
    try:
        return datetime(day.year, day.month, day.day, h, mi, s, us, tzinfo=tzinfo)
    except ValueError:  # hour 24, second 60
        raise _invalid(text) from None


def _date_length(text: str) -> int:
    """Where the date ends, given that the separator after it may be any character, a digit too."""
    if text[4:5] == "-":
        if text[5:6] != "W":
            return 10                                   # YYYY-MM-DD
        # YYYY-Www-D, unless a digit follows at 10: then YYYY-Www and `-` is the separator
        return 10 if text[8:9] == "-" and text[10:11] not in _DIGITS else 8
    if text[4:5] == "W":
        run = 0                                         # digits after YYYYWww
        while text[7 + run:8 + run] in _DIGITS:
            run += 1
        if run <= 1:
            return 7 + run                              # YYYYWww or YYYYWwwD
        # Past the weekday come a separator and a basic time, whose digits go in pairs: an odd
        # run means the separator is a digit and there is no weekday.
        return 7 if run % 2 else 8
    return 8                                            # YYYYMMDD


def _time(text: str, whole: str) -> tuple[tuple[int, int, int, int], timezone | None]:
    at = next((i for i, c in enumerate(text) if c in "+-Z"), len(text))
    clock, zone = text[:at], text[at:]
    if zone:
        # Before an offset 3.11 skips one character after a whole time (`10:05 Z`, `10:05:+01`),
        # and anything after a fraction of six digits or more (it reads no further).
        m = _CLOCK.match(clock)
        if m and len(m["f"] or "") >= 6:
            clock = clock[:m.end()]
        elif clock[-1:] not in _DIGITS:
            clock = clock[:-1]
            if "." in clock or "," in clock:
                raise _invalid(whole)
    fields = _clock(clock, whole)
    if not zone:
        return fields, None
    if zone == "Z":
        return fields, timezone.utc
    if zone[0] == "Z":
        raise _invalid(whole)
    h, mi, s, us = _clock(zone[1:], whole)
    offset = timedelta(hours=h, minutes=mi, seconds=s, microseconds=us)
    if zone[0] == "-":
        offset = -offset
    if not (h or mi or s):   # 3.11 reads an offset of no whole second as UTC, whatever its fraction
        return fields, timezone.utc
    try:
        return fields, timezone(offset)
    except ValueError:  # a day or more
        raise _invalid(whole) from None


def _clock(text: str, whole: str) -> tuple[int, int, int, int]:
    m = _CLOCK.fullmatch(text)
    if not m:
        raise _invalid(whole)
    fraction = (m["f"] or "")[:6].ljust(6, "0")
    return int(m["h"]), int(m["m"] or 0), int(m["s"] or 0), int(fraction)
