"""Rules of a clause that need no verb table: roles ("my boss is Tomasz"), tasks and
goals, deadlines, standing instructions."""
from __future__ import annotations

import re

from .clauses import _Clause
from .dates import _DATE_WORDS, _SEASONS, _parse_date
from .lexicons import (
    _ADJ_OBJECTS, _COGNITION, _DETERMINERS, _LIGHT_VERBS, _MONTHS, _NEGATORS, _NOT_CURRENT,
    _OBJ_STOP, _PERSON, _PERSON_ROLES, _PLURAL_ROLES, _POSSESSIVES, _PRONOUNS, _TITLES,
    _UNIQUE_MODIFIERS)
from .phrases import MAX_NAME_TOKENS, _np, _split_objects
from .text import _is_cap, _is_word, _lower, _upper_snake


def _role_words(lows: list[str], i: int, stop: set[str]) -> tuple[list[str], int] | None:
    """Lowercase role words from lows[i] until a word in `stop` (at most three)."""
    words = []
    j = i
    while j < len(lows) and lows[j] not in stop and len(words) < 4:
        if not re.fullmatch(r"[^\W\d_][\w\-]*(?:'s)?", lows[j]):
            return None
        words.append(lows[j])
        j += 1
        if words[-1].endswith("'s"):
            break
    if not words or len(words) > 3 or j >= len(lows):
        return None
    if words[0] in _PRONOUNS or words[0] in _DETERMINERS:
        return None
    return words, j


def _role_fact(cl: _Clause, owner: str, role: list[str], obj: str,
               functional: bool | None = None) -> bool:
    """owner HAS_<ROLE> obj, or IS_CALLED / HAS_AGE for name / age."""
    col = cl.col
    if role and role[0] in _NOT_CURRENT:
        return False
    role = [w for w in role if w not in ("new", "current", "present")] or role
    if role == ["name"] or role in (["first", "name"], ["full", "name"], ["nickname"]):
        col.fact(owner, "IS_CALLED", obj, f"{owner} is called {obj}", True,
                 object_hints=_PERSON)
        return True
    if role == ["age"]:
        col.fact(owner, "HAS_AGE", obj, f"{owner} is {obj} years old", True,
                 object_hints=("age", "trait"))
        return True
    head = role[-1]
    if functional is None:
        functional = head not in _PLURAL_ROLES or any(w in _UNIQUE_MODIFIERS
                                                      for w in role[:-1])
    hints = _PERSON + tuple(role) if head in _PERSON_ROLES else tuple(role)
    relation = "HAS_" + _upper_snake(role)
    text = " ".join(role)
    col.fact(owner, relation, obj, f"{owner}'s {text} is {obj}", functional,
             subject_hints=_PERSON, object_hints=hints)
    return True


def _role_object_ok(role: list[str], toks: list[str], lows: list[str], i: int,
                    caseless: bool) -> tuple[str, int] | None:
    """The X of "my <role> is X": a name, number, date, address; lowercase only for
    favourite-like roles."""
    if i >= len(toks):
        return None
    person = role[-1] in _PERSON_ROLES or role[-1] in ("name", "nickname")
    if lows[i] in ("called", "named"):
        i += 1
        if i >= len(toks):      # "my dog is called" at the end of a clause: no name
            return None
    tok = toks[i]
    if "@" in tok or tok.startswith("http"):
        return tok, i + 1
    date = _parse_date(toks, lows, i) if role[-1] in ("birthday", "anniversary", "deadline") \
        else None
    if date:
        return date[0], i + date[1]
    loose = any(w in ("favourite", "favorite", "hobby", "job", "occupation", "profession",
                      "title", "major", "hometown", "language", "religion", "diet",
                      "nationality", "pronouns", "sign")
                for w in role)
    if re.fullmatch(r"\d+(?:[.,]\d+)?", tok):
        if role[-1] == "age":
            return tok, i + 1
        if not loose and role[-1] not in ("number", "phone", "pin", "size", "height", "weight"):
            return None
        return tok, i + 1
    got = _np(toks, lows, i, caseless=caseless, name_like=person,
              capital=not loose and not caseless)
    if got is None:
        return None
    name, end = got
    if not loose and not (_is_cap(name) or re.match(r"\d", name) or (caseless and person)):
        return None
    # "my job is boring" / "my sister is a doctor": not an identity
    if _lower(name) in _ADJ_OBJECTS:
        return None
    if lows[i] in _DETERMINERS and not loose:
        return None
    return name, end


def _try_role(cl: _Clause) -> bool:
    """my <role> is X / X is my <role> / my <role>'s name is X / my <role> X ..."""
    toks, lows = cl.toks, cl.lows
    n = len(lows)
    if n >= 3 and lows[0] in ("my", "your"):
        owner = cl.owner(lows[0])
        got = _role_words(lows, 1, {"is", "=", "'s", "are"})
        if got and lows[got[1]] == "are":
            role, j = got
            head = role[-1]
            plural = head in ("children", "people", "men", "women") or (
                head.endswith("s") and not head.endswith("ss"))
            if not cl.negated and plural and \
                    j + 1 < n and lows[j + 1] not in _NEGATORS:
                singular = head[:-3] + "y" if head.endswith("ies") else \
                    head[:-2] if head.endswith(("ches", "shes", "sses", "xes")) else head[:-1]
                role = role[:-1] + [{"children": "child", "people": "person"}.get(head,
                                                                               singular)]
                names = _split_objects(toks, lows, j + 1, caseless=cl.caseless,
                                       name_like=True, capital=True)
                for name, _end in names:
                    if _is_cap(name) or cl.caseless:
                        _role_fact(cl, owner, role, name, functional=False)
                return bool(names)
            return False
        if got:
            role, j = got
            if role[-1].endswith("'s"):
                role[-1] = role[-1][:-2]
                if lows[j] == "name":          # my partner's name is Alex
                    if j + 1 < n and lows[j + 1] == "is":
                        j += 2
                    else:
                        return False
                elif j + 1 < n and lows[j] not in ("a", "an", "the") and (
                        lows[j + 1] == "is" or j + 2 < n and lows[j + 2] == "is"):
                    # my mom's birthday is May 5 -> User's mom HAS_BIRTHDAY May 5
                    sub = _role_words(lows, j, {"is"})
                    if sub is None or role[-1] not in _PERSON_ROLES | {"dog", "cat"}:
                        return False
                    owner = f"{owner}'s {' '.join(role)}"
                    role, j = sub[0], sub[1] + 1
                # else: "my name's Jamie" = "my name is Jamie"
            elif lows[j] in ("is", "="):
                j += 1
            else:
                return False
            if j < n and lows[j] in _NEGATORS or cl.negated:
                return True
            if j < n and lows[j] in ("now", "currently", "still", "actually"):
                j += 1
            if role[-1] in ("plan", "goal", "aim", "dream", "ambition", "resolution") \
                    and j < n and lows[j] == "to":
                return _task(cl, owner, j + 1, "HAS_GOAL")
            obj = _role_object_ok(role, toks, lows, j, cl.caseless)
            if obj is None:
                return False
            return _role_fact(cl, owner, role, obj[0])
    # X is my <role>
    if "is" in lows[:MAX_NAME_TOKENS + 2]:
        k = lows.index("is")
        if 0 < k <= MAX_NAME_TOKENS and k + 2 < n and lows[k + 1] in ("my", "your"):
            got = _np(toks, lows, 0, caseless=cl.caseless, name_like=True, capital=True)
            role_got = _role_words(lows, k + 2, {",", ".", "!", "and", "but", "now", "too",
                                                 "?", "in", "at", "from", "for", "since",
                                                 "who", "which", "as"})
            if role_got is None and k + 2 < n:
                words = [w for w in lows[k + 2:] if re.fullmatch(r"[^\W\d_][\w\-]*", w)]
                role_got = (words, n) if 0 < len(words) <= 3 and len(words) == n - k - 2 \
                    else None
            if got and got[1] == k and role_got and not cl.negated:
                name = got[0]
                if not (_is_cap(name) or cl.caseless):
                    return False
                return _role_fact(cl, cl.owner(lows[k + 1]), role_got[0], name)
    return False


def _appositives(cl: _Clause) -> None:
    """"my sister Anna", "my dentist, Dr Okafor," anywhere in the clause."""
    toks, lows = cl.toks, cl.lows
    n = len(lows)
    for i in range(n - 2):
        if lows[i] not in ("my", "your"):
            continue
        for size in (1, 2):
            k = i + 1 + size
            if k >= n:
                break
            role = lows[i + 1:k]
            if not all(re.fullmatch(r"[^\W\d_][\w\-]*", w) for w in role) or \
                    role[-1] not in _PERSON_ROLES and role[-1] not in ("dog", "cat", "pet",
                                                                       "horse", "car", "bike"):
                continue
            j = k + 1 if k < n and toks[k] == "," else k
            if j < n and (_is_cap(toks[j]) or lows[j] in _TITLES and j + 1 < n):
                got = _np(toks, lows, j, caseless=cl.caseless, name_like=True, capital=True)
                if got and _is_cap(got[0].split()[0]) and not cl.negated:
                    _role_fact(cl, cl.owner(lows[i]), role, got[0])
                    break


def _task(cl: _Clause, subject: str, i: int, relation: str) -> bool:
    """HAS_TASK / HAS_GOAL with the verb phrase at toks[i:] (and DUE_ON for 'by Friday')."""
    toks, lows = cl.toks, cl.lows
    n = len(lows)
    words, j = [], i
    date = None
    while j < n and len(words) < 8:
        if lows[j] in ("by", "before", "on", "until", "till") or lows[j] in _DATE_WORDS \
                or lows[j] in ("next", "this"):
            date = _parse_date(toks, lows, j)
            if date:
                break
        if not _is_word(toks[j]) or lows[j] in ("because", "so", "but", "since", "if", "when",
                                                "while", "and", "or", "then", "as", "though",
                                                "although", "by", "before", "until", "till"):
            break
        if lows[j] in ("my", "your") and words:
            j += 1
            continue
        words.append(toks[j])
        j += 1
    while words and _lower(words[-1]) in _OBJ_STOP | {"now", "soon", "later", "asap"}:
        words.pop()
    if not words:
        return False
    low_words = [_lower(w) for w in words]
    verb = low_words[0]
    if verb in _COGNITION or not re.fullmatch(r"[^\W\d_][\w\-]*", verb):
        return False
    if any(w in ("it", "this", "that", "them", "something", "anything", "what", "how",
                 "whether", "why", "you", "me", "one") for w in low_words[1:]):
        return False
    if len(words) == 1 and verb in _LIGHT_VERBS:
        return False
    phrase = " ".join(words)
    verb_text = {"HAS_TASK": "needs to", "HAS_GOAL": "wants to", "HAS_PLAN": "plans to"}[relation]
    hints = {"HAS_TASK": ("task",), "HAS_GOAL": ("goal",), "HAS_PLAN": ("plan", "goal")}[relation]
    cl.col.fact(subject, relation, phrase, f"{subject} {verb_text} {phrase}", False,
                subject_hints=_PERSON, object_hints=hints, phrase_object=True)
    if date and relation == "HAS_TASK":
        _due(cl, phrase, date[0], ("task",), phrase_subject=True)
    return True


def _due(cl: _Clause, subject: str, date: str, hints: tuple[str, ...],
         phrase_subject: bool = False) -> None:
    first = date.split()[0].lower()
    if date.lower() in _MONTHS or date.lower() in _SEASONS:
        text = f"{subject} is due in {date}"
    elif first == "end":
        text = f"{subject} is due by the {date}"
    elif first in ("next", "this", "coming", "following", "in") or date.lower() in (
            "today", "tonight", "tomorrow"):
        text = f"{subject} is due {date}"
    else:
        text = f"{subject} is due on {date}"
    cl.col.fact(subject, "DUE_ON", date, text, True, subject_hints=hints,
                object_hints=("deadline", "date"), phrase_subject=phrase_subject)


def _try_due(cl: _Clause) -> bool:
    """'X is due (on) Friday', 'the deadline for X is Friday', 'X's deadline is Friday'."""
    toks, lows = cl.toks, cl.lows
    n = len(lows)
    if "due" in lows:
        k = lows.index("due")
        subj_end = k
        if k > 0 and lows[k - 1] in ("now", "still", "also", "actually"):
            subj_end -= 1
        if subj_end > 0 and lows[subj_end - 1] in ("is", "are", "was", "'s"):
            subj_end -= 1
        if subj_end > 0 and lows[subj_end - 1] in _NEGATORS or cl.negated:
            return True
        date = _parse_date(toks, lows, k + 1)
        if date and subj_end > 0:
            return _due_subject(cl, 0, subj_end, date[0])
    if "deadline" in lows:
        k = lows.index("deadline")
        # the deadline for X is DATE
        if k + 1 < n and lows[k + 1] in ("for", "of", "on") and "is" in lows[k + 2:]:
            m = lows.index("is", k + 2)
            date = _parse_date(toks, lows, m + 1 + (1 if m + 1 < n and lows[m + 1] in
                                                    ("now", "still") else 0))
            if date:
                return _due_subject(cl, k + 2, m, date[0])
        # X's deadline is DATE / X deadline is DATE
        if k + 1 < n and lows[k + 1] == "is" and k > 0:
            date = _parse_date(toks, lows, k + 2 + (1 if k + 2 < n and lows[k + 2] in
                                                    ("now", "still") else 0))
            if date:
                end = k
                return _due_subject(cl, 0, end, date[0])
    return False


def _due_subject(cl: _Clause, start: int, end: int, date: str) -> bool:
    toks = list(cl.toks[start:end])
    lows = list(cl.lows[start:end])
    if toks and toks[-1].endswith("'s"):
        toks[-1] = toks[-1][:-2]
        lows[-1] = lows[-1][:-2]
    while toks and (lows[0] in _DETERMINERS or lows[0] in _POSSESSIVES):
        toks, lows = toks[1:], lows[1:]
    if not toks or len(toks) > 6 or lows[0] in _PRONOUNS:
        return False
    if not all(_is_word(t) for t in toks):
        return False
    name = " ".join(toks)
    _due(cl, name, date, ("task", "project"))
    return True


def _try_instruction(cl: _Clause) -> bool:
    if cl.speaker != "User":
        return False
    toks, lows = cl.toks, cl.lows
    k = 0
    if lows[:1] == ["please"]:
        k = 1
    standing = False
    for phrase in (("from", "now", "on"), ("going", "forward"), ("in", "future"),
                   ("in", "the", "future"), ("every", "time"), ("whenever", "you")):
        if tuple(lows[k:k + len(phrase)]) == phrase:
            k += len(phrase)
            standing = True
            while k < len(lows) and toks[k] in (",", ":"):
                k += 1
            if lows[k:k + 1] == ["please"]:
                k += 1
            break
    words = toks[k:]
    wl = lows[k:]
    if not words:
        return False
    if wl[0] in ("always", "never") or (wl[:2] == ["do", "not"] and standing):
        standing = True
    if not standing or not words:
        return False
    if wl[0] in ("i", "we", "my"):
        return False
    phrase_words = [w for w in words if _is_word(w) or w in ("-", "'")]
    if len(phrase_words) < 2:
        return False
    if phrase_words[0].lower() in ("always", "never"):
        phrase_words[0] = phrase_words[0].lower()
    phrase = " ".join(phrase_words[:12])
    cl.col.fact("User", "GAVE_INSTRUCTION", phrase,
                f"User asked the assistant to {phrase}", False, object_hints=("instruction",),
                phrase_object=True)
    return True
