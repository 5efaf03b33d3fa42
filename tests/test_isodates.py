"""Dates typed by users, written in files or sent over the wire read the same on Python 3.10-3.13
(PyGPT's AppImage runs 3.10, its Snap 3.12): `parse_iso` reads what 3.11's fromisoformat reads."""
from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memoryplus.common.isodates import _parse, parse_iso

UTC = timezone.utc


def tz(hours=0, minutes=0, seconds=0, microseconds=0):
    return timezone(timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=microseconds))


# What users and other programs write, and what it means (3.11's reading, by the docs' examples).
READ = {
    "2025-01-31": datetime(2025, 1, 31),
    "20250131": datetime(2025, 1, 31),
    "2025-01-31T10:30:00Z": datetime(2025, 1, 31, 10, 30, tzinfo=UTC),
    "2025-01-31T10:30Z": datetime(2025, 1, 31, 10, 30, tzinfo=UTC),
    "2025-01-31T10:30:00.283Z": datetime(2025, 1, 31, 10, 30, 0, 283000, tzinfo=UTC),
    "2025-01-31 10:30:00.123456789+00:00": datetime(2025, 1, 31, 10, 30, 0, 123456, tzinfo=UTC),
    "2025-01-31T10:30:00,5": datetime(2025, 1, 31, 10, 30, 0, 500000),
    "2025-01-31T10": datetime(2025, 1, 31, 10),
    "20250131T103005": datetime(2025, 1, 31, 10, 30, 5),
    "20250131T1030+0100": datetime(2025, 1, 31, 10, 30, tzinfo=tz(1)),
    "2025-01-31T10:30:00+05": datetime(2025, 1, 31, 10, 30, tzinfo=tz(5)),
    "2025-01-31T10:30:00-03:30": datetime(2025, 1, 31, 10, 30, tzinfo=tz(-3, -30)),
    "2025-01-31T10:30:00+05:30:15.5": datetime(2025, 1, 31, 10, 30, tzinfo=tz(5, 30, 15, 500000)),
    "2025-01-31T10:30:00-00:00": datetime(2025, 1, 31, 10, 30, tzinfo=UTC),
    "2025-01-31T10:30:00 Z": datetime(2025, 1, 31, 10, 30, tzinfo=UTC),
    "2025-01-31x10:30": datetime(2025, 1, 31, 10, 30),
    "2025-W05-5": datetime(2025, 1, 31),
    "2025W055T10:30Z": datetime(2025, 1, 31, 10, 30, tzinfo=UTC),
    "2025-W05": datetime(2025, 1, 27),
    "2024-02-29T23:59:59.999999+23:59": datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=tz(23, 59)),
}
REFUSED = [
    "", "2025", "2025-01", "2025-1-31", "2025-0131", "202501-31", "2025-02-30", "2025-13-01",
    "2025-01-31T", "2025-01-31T1", "2025-01-31T103", "2025-01-31T10:3", "2025-01-31T10:3005",
    "2025-01-31T1030:05", "2025-01-31T24:00", "2025-01-31T23:59:60", "2025-01-31T10:30:00.",
    "2025-01-31T10:30:00z", "2025-01-31T10:30:00Z ", " 2025-01-31", "2025-01-31 ",
    "2025-01-31T10:30Z+01:00", "2025-01-31T10:30+01:00Z", "2025-01-31T10:30+24:00",
    "2025-01-31T10:30+01:3", "2025-01-31T10:30+", "2025-W54-1", "2025-W05-8", "2025-W00-1",
    "2025-W055", "2025W05-5", "２025-01-31", "2025-01-٣1", "yesterday", "31/01/2025",
]


@pytest.mark.parametrize("text", sorted(READ))
def test_every_iso_form_is_read_as_python_3_11_reads_it(text):
    assert parse_iso(text) == READ[text]
    assert parse_iso(text).utcoffset() == READ[text].utcoffset()
    assert _parse(text) == READ[text] and _parse(text).tzinfo == READ[text].tzinfo


@pytest.mark.parametrize("text", REFUSED)
def test_what_is_not_an_iso_date_is_a_value_error(text):
    with pytest.raises(ValueError, match="Invalid isoformat string"):
        _parse(text)
    with pytest.raises(ValueError):
        parse_iso(text)


def test_a_value_that_is_not_text_is_a_type_error():
    for value in (None, 20250131, b"2025-01-31"):
        with pytest.raises(TypeError):
            parse_iso(value)


def test_what_isoformat_writes_reads_back():
    for value in (datetime(2025, 1, 31, 10, 30, 5, 7, tzinfo=tz(-8)), datetime(1, 1, 1),
                  datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)):
        assert _parse(value.isoformat()) == value and _parse(value.isoformat(" ")) == value


# The pieces ISO 8601 strings are made of, valid and not, mixed at random.
digits = st.integers(0, 99).map("{:02d}".format)
dates = st.one_of(
    st.tuples(st.integers(0, 9999).map("{:04d}".format), digits, digits, st.sampled_from(["-", ""]))
      .map(lambda t: t[3].join(t[:3])),
    st.tuples(st.integers(0, 9999).map("{:04d}".format), st.sampled_from(["-W", "W"]), digits,
              st.sampled_from(["", "-", ""]), st.sampled_from(["", "0", "1", "5", "7", "8"]))
      .map("".join),
)
fraction = st.one_of(st.just(""), st.tuples(st.sampled_from(".,"), st.text("0123456789", max_size=9)).map("".join))
# Up to the seconds: past them 3.11's C parser reads glued digits its own odd way ('103000123' is
# .123 s, '1030005+01' drops the 5), which no one writes and the fallback does not copy.
clock = st.tuples(digits, st.sampled_from([":", ""]), st.lists(digits, max_size=2), fraction).map(
    lambda t: t[1].join([t[0], *t[2]]) + t[3])
zone = st.one_of(st.just(""), st.sampled_from(["Z", "z", " Z", "Z+01"]),
                 st.tuples(st.sampled_from(["+", "-", " +"]), clock).map("".join))
stamps = st.one_of(
    dates,
    st.tuples(dates, st.sampled_from(["T", " ", "x", "é", "\u3000", ""]), clock, zone).map("".join),
)


def _outcome(parse, text):
    try:
        value = parse(text)
    except ValueError:
        return "ValueError"
    return value, value.utcoffset()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="compares with 3.11's own fromisoformat")
# derandomize: the same 3,000 strings on every run, so CI cannot fail on a string no run before
# it tried (to explore new strings, run it by hand with derandomize=False and more examples)
@settings(max_examples=3000, deadline=None, derandomize=True)
@given(st.one_of(stamps, stamps.map(lambda s: s[:-1]), st.text(max_size=30)))
@example("2025-01-31T10:30:00.1234567+01:00:00.5")
@example("0001W01000-00.1")     # an offset of a fraction of a second alone: UTC, as 3.11 reads it
def test_the_fallback_agrees_with_python_3_11_on_any_string(text):
    assert _outcome(_parse, text) == _outcome(datetime.fromisoformat, text)
