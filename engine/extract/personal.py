"""Rules for the common personal facts people ask about later (issue 18): the date of a
recurring event ("Lena turns 7 on May 3rd"), job changes ("I quit Siemens and joined a
startup called Nordlicht as CTO"), diets ("I'm pescatarian now"), purchases, plans ("I'm
going to visit my parents"), and what the assistant recommended ("I'd recommend 'Piranesi'").
Single-valued ones (birthday, employer, job title, diet) are functional: a new one
supersedes the old. The assistant has no job, diet, plans or purchases: its "I" in a letter
or a story it drafts for the user ("I joined XYZ Corp as an analyst") says nothing of anyone.
"""
from __future__ import annotations

import re

from .clauses import _Clause
from .collector import _Collector
from .dates import _parse_date
from .lexicons import _DETERMINERS, _FORMS, _MONTHS, _ORG, _PERSON, _POSSESSIVES
from .phrases import _np
from .rules import _task
from .text import _is_cap, _lower

DIETS = frozenset("""
vegetarian vegan pescatarian pescetarian flexitarian keto paleo gluten-free dairy-free
lactose-free plant-based halal kosher
""".split())
# what a person joins as an employer (not a club, a gym or a band)
EMPLOYERS = frozenset("""
startup start-up company firm agency studio lab bank consultancy business agency team
hospital school university practice corporation organisation organization nonprofit
non-profit charity shop store restaurant
""".split())


def birthday(cl: _Clause, subject: str, k: int) -> None:
    """'turns 7 on May 3rd': a calendar date after an age is the subject's birthday (the age
    goes stale next year, the date does not)."""
    date = _parse_date(cl.toks, cl.lows, k)
    if date and any(w.lower() in _MONTHS for w in date[0].split()):
        cl.col.fact(subject, "HAS_BIRTHDAY", date[0], f"{subject}'s birthday is {date[0]}",
                    True, subject_hints=_PERSON, object_hints=("date", "birthday"))


def diet(cl: _Clause, subject: str, k: int, negated: bool) -> bool:
    """'I am (a) vegan', 'I'm pescatarian now', 'went vegetarian': one diet at a time."""
    lows = cl.lows
    if subject == "Assistant":
        return False
    if k < len(lows) and lows[k] in ("a", "an", "now", "strictly", "fully", "mostly"):
        k += 1
    if k >= len(lows) or lows[k] not in DIETS:
        return False
    if not negated:
        cl.col.fact(subject, "HAS_DIET", lows[k], f"{subject}'s diet is {lows[k]}", True,
                    subject_hints=_PERSON, object_hints=("diet", "preference", "health"))
    return True


def job_change(cl: _Clause, subject: str, j: int, lemma: str, form: str, negated: bool) -> bool:
    """'joined a startup called Nordlicht as CTO', 'joined Acme as a designer' (an employer:
    WORKS_AT, and WORKS_AS the role), 'quit Siemens' (QUIT_JOB_AT)."""
    toks, lows = cl.toks, cl.lows
    n = len(lows)
    if negated or form == "ing" or subject == "Assistant":
        return False
    if lemma == "quit":
        k = j + 1
        if k < n and lows[k] in ("my", "the") and k + 2 < n and lows[k + 1] == "job" \
                and lows[k + 2] in ("at", "with"):
            k += 3
        org = _np(toks, lows, k, caseless=cl.caseless, name_like=True, capital=True)
        if org is None or not (_is_cap(org[0]) or cl.caseless):
            return False
        cl.col.fact(subject, "QUIT_JOB_AT", org[0], f"{subject} quit {org[0]}", False,
                    subject_hints=_PERSON, object_hints=_ORG)
        return True
    if lemma != "join":
        return False
    k = j + 1
    employer = False
    while k < n and (lows[k] in _DETERMINERS or lows[k] in ("new", "small", "tiny", "local",
                                                          "big", "young", "tech")):
        k += 1
    if k < n and lows[k] in EMPLOYERS:
        employer = True
        k += 1
        if k < n and lows[k] in ("called", "named"):
            k += 1
    org = _np(toks, lows, k, caseless=cl.caseless, name_like=True, capital=True)
    if org is None or not (_is_cap(org[0]) or cl.caseless):
        return False
    end = org[1]
    role = None
    if end + 1 < n and lows[end] == "as":
        role = _np(toks, lows, end + 1, caseless=cl.caseless, name_like=False)
    if not employer and role is None:
        return False            # "joined Acme": a club or a company, the MEMBER_OF rule says
    cl.col.fact(subject, "WORKS_AT", org[0], f"{subject} works at {org[0]}", True,
                subject_hints=_PERSON, object_hints=_ORG)
    title = _until_date(role[0]) if role is not None else ""
    if title:
        art = "" if _is_cap(title) else ("an " if title[:1] in "aeiou" else "a ")
        cl.col.fact(subject, "WORKS_AS", title, f"{subject} works as {art}{title}", True,
                    subject_hints=_PERSON, object_hints=("occupation", "role"))
    return True


_NOT_PART = frozenset(("last", "next", "this", "since", "yesterday", "today", "recently",
                       "now", "online", "well", "part", "such", *_MONTHS))


def _until_date(phrase: str) -> str:
    """'senior designer last week' -> 'senior designer', 'yoga mat online' -> 'yoga mat': a
    date or a manner is no part of a job title or a thing."""
    words = []
    for w in phrase.split():
        if _lower(w) in _NOT_PART:
            break
        words.append(w)
    return " ".join(words)


def purchase(cl: _Clause, subject: str, j: int, form: str, aux: list[str],
             negated: bool) -> bool:
    """'I bought a Kindle', 'I've just bought a new bike': the subject owns it now."""
    if negated or form != "past" or subject == "Assistant" or \
            any(a in ("had", "was", "were") for a in aux):
        return False
    got = _np(cl.toks, cl.lows, j + 1, caseless=cl.caseless, name_like=False)
    thing = _until_date(got[0]) if got else ""
    if not thing or _lower(thing) in ("it", "one", "them"):
        return False
    art = cl.lows[j + 1] if cl.lows[j + 1] in ("a", "an", "the") else ""
    shown = f"{art} {thing}" if art else thing
    cl.col.fact(subject, "OWNS", thing, f"{subject} bought {shown}", False,
                subject_hints=_PERSON, object_hints=("thing", "product"))
    return True


def plan(cl: _Clause, subject: str, j: int, aux: list[str], negated: bool) -> bool:
    """'I'm going to visit my parents in June': a plan (HAS_PLAN); 'going to Japan' too."""
    lows = cl.lows
    if negated or subject == "Assistant" or not any(a in ("am", "is", "are") for a in aux) \
            or j + 2 >= len(lows) \
            or lows[j + 1] != "to":
        return False
    nxt = lows[j + 2]
    if _is_cap(cl.toks[j + 2]) and not cl.caseless:
        place = _np(cl.toks, lows, j + 2, caseless=False, name_like=True, capital=True)
        if place:
            cl.col.fact(subject, "HAS_PLAN", f"go to {place[0]}",
                        f"{subject} plans to go to {place[0]}", False, subject_hints=_PERSON,
                        object_hints=("plan", "goal", "place"), phrase_object=True)
            return True
        return False
    # a verb: one of the verb table, or a word with an object after it ("call my mom"),
    # not "going to bed" or "going to the gym"
    after = lows[j + 3] if j + 3 < len(lows) else ""
    verb = (nxt in _FORMS and _FORMS[nxt][1] == "base") or (
        after in _DETERMINERS or after in _POSSESSIVES or (j + 3 < len(lows)
                                                           and _is_cap(cl.toks[j + 3])))
    if nxt in _DETERMINERS or nxt == "be" or not nxt.isalpha() or not verb:
        return False
    return _task(cl, subject, j + 2, "HAS_PLAN")


# ── what the assistant recommended ──────────────────────────────────────────────────────
_RECOMMEND = re.compile(
    r"\b(?:I(?: would|'d)?(?: (?:highly|strongly|definitely|really|also))? (?:recommend|suggest)"
    r"(?:ed)?(?: (?:reading|watching|trying|checking out|listening to|visiting|playing))?"
    r"|you (?:might|may|would|will|should|could) (?:also |really )?(?:enjoy|like|love|try|"
    r"read|watch|check out)"
    r"|(?:recommendation|suggestion|pick) (?:is|would be))\s+", re.I)
_YOU_RECOMMENDED = re.compile(r"\byou (?:recommended|suggested)[\s,:]+", re.I)
_CAP_WORD = r"[A-Z0-9][\w'’:&\-]*"
_TITLE = re.compile(r"[\"“'‘*]+([^\"”'’*\n]{2,80}?)[\"”'’*]+"
                    rf"|({_CAP_WORD}(?:(?:\s+(?:of|the|and|a|an|in|on|to|for|&|de|la))*"
                    rf"\s+{_CAP_WORD})*)")


def recommendations(speaker: str, sentence: str, col: _Collector) -> None:
    """'I'd recommend "Piranesi" by Susanna Clarke' (the assistant speaking), or 'you
    recommended Sapiens' (the user): Assistant RECOMMENDED the title."""
    pattern = _YOU_RECOMMENDED if speaker == "User" else _RECOMMEND
    for m in pattern.finditer(sentence):
        rest = sentence[m.end():]
        rest = re.sub(r"^(?:the (?:book|novel|film|movie|show|series|album|podcast|game|app) |"
                      r"(?:a|an|the) )", "", rest)
        t = _TITLE.match(rest)
        if not t:
            continue
        title = (t.group(1) or t.group(2) or "").strip(" ,.;:!?-")
        words = title.split()
        if len(title) < 2 or len(words) > 10 or _lower(words[0]) in ("i", "you", "it", "this",
                                                               "that", "these", "those"):
            continue
        col.fact("Assistant", "RECOMMENDED", title, f"Assistant recommended {title}", False,
                 object_hints=("thing", "product", "book", "media"))
