"""Rules of a clause with a subject and a verb: the subject, the verb group (auxiliaries,
negation, tense) and the verb and copula rules of lexicons."""
from __future__ import annotations

import re

from . import personal
from .clauses import _Clause
from .dates import _parse_date
from .lexicons import (
    _ADJ_OBJECTS, _ADVERBS, _AUX, _BE_NEGATED_PREF, _BE_RULES, _COGNITION, _FORMS, _MODALS,
    _NEGATORS, _ORG, _PERSON, _PERSON_ROLES, _PERSON_SUBJECT, _PLACE, _PREF, _RULES, _STOP_ANY,
    _TASTES, _TITLES)
from .phrases import _np, _split_objects
from .rules import _task
from .text import _gerund, _is_cap, _lower, _upper_snake


def _subject(cl: _Clause, inherited: tuple[str, bool] | None):
    """(subject name, first person or named 3rd person, index after the subject)."""
    toks, lows = cl.toks, cl.lows
    if not lows:
        return None
    if lows[0] in ("i", "you"):
        return cl.owner(lows[0]), lows[0] == "i", 1
    if lows[0] == "call" and len(lows) > 2 and lows[1] == "me":
        return None
    if lows[0] in ("my", "your"):
        # "my brother works at Google": User's brother is the subject
        for size in (1, 2):
            k = 1 + size
            if k < len(lows) and lows[k - 1] in _PERSON_ROLES | {"dog", "cat"} and \
                    all(re.fullmatch(r"[^\W\d_][\w\-]*", w) for w in lows[1:k]) and \
                    (lows[k] in _FORMS and _FORMS[lows[k]][1] in ("3sg", "past")
                     or lows[k] in ("is", "has", "was") or lows[k] in _ADVERBS
                     or lows[k] in ("does", "did", "can", "will")):
                if lows[k] == "is" and k + 1 < len(lows) and lows[k + 1] in ("called",
                                                                             "named"):
                    break
                role = " ".join(lows[1:k])
                return f"{cl.owner(lows[0])}'s {role}", False, k
        # "my sister Anna lives in Rome": the name is the subject
        for size in (1, 2):
            k = 1 + size
            if k < len(lows) and (_is_cap(toks[k]) or lows[k] in _TITLES) and \
                    all(re.fullmatch(r"[^\W\d_][\w\-]*", w) for w in lows[1:k]):
                got = _np(toks, lows, k, caseless=False, name_like=True, capital=True)
                if got and got[1] < len(lows) and (lows[got[1]] in _FORMS or lows[got[1]] in
                                                   _AUX or lows[got[1]] in _ADVERBS
                                                   or lows[got[1]] in _MODALS):
                    return got[0], False, got[1]
        return None
    if _is_cap(toks[0]) or lows[0] in _TITLES:
        got = _np(toks, lows, 0, caseless=False, name_like=True, capital=True)
        if got and lows[0] not in _STOP_ANY:
            name, end = got
            if _lower(name) in _PERSON_ROLES:      # "Mum lives in Cork"
                name = f"User's {_lower(name)}"
            if end < len(lows) and (lows[end] in _FORMS or lows[end] in _AUX
                                    or lows[end] in _MODALS or lows[end] in _ADVERBS
                                    or lows[end] in _NEGATORS):
                return name, False, end
        return None
    if inherited and (lows[0] in _FORMS or lows[0] in _AUX or lows[0] in _MODALS
                      or lows[0] in _ADVERBS):
        return inherited[0], inherited[1], 0
    return None


def _verb_group(lows: list[str], i: int):
    """Auxiliaries, negation and adverbs before the main verb.

    Returns (index of main verb, aux set, negated, modal, perfect, progressive-been)."""
    aux: list[str] = []
    negated = False
    n = len(lows)
    while i < n:
        w = lows[i]
        if w in _AUX and not (i + 1 < n and lows[i + 1] in ("to",) and w in ("have", "has")):
            # "have" as a main verb: "I have a dog" (next word not a verb form)
            if w in ("have", "has", "had") and not (i + 1 < n and (
                    lows[i + 1] in _FORMS and _FORMS[lows[i + 1]][1] in ("past", "ing")
                    or lows[i + 1] in _NEGATORS or lows[i + 1] in _ADVERBS
                    or lows[i + 1] == "been")):
                break
            if w in ("am", "is", "are", "was", "were") and not (i + 1 < n and (
                    (lows[i + 1] in _FORMS and _FORMS[lows[i + 1]][1] in ("ing",))
                    or lows[i + 1] in _NEGATORS or lows[i + 1] in _ADVERBS)):
                break        # copula: handled by the be-rules
            aux.append(w)
        elif w in _MODALS:
            aux.append(w)
        elif w in _NEGATORS:
            negated = True
        elif w == "no" and i + 1 < n and lows[i + 1] == "longer":
            negated = True
            i += 1
        elif w in ("kind", "sort") and i + 1 < n and lows[i + 1] == "of":
            i += 1
        elif w in _ADVERBS:
            pass
        elif w == "been" and aux and aux[-1] in ("have", "has"):
            if i + 1 < n and lows[i + 1] in _FORMS and _FORMS[lows[i + 1]][1] == "ing":
                aux.append("been")
            else:
                break
        else:
            break
        i += 1
    return i, aux, negated


def _tense_ok(rule_past: bool, form: str, aux: list[str], progressive_ok: bool,
              can_ok: bool) -> bool:
    modal = [a for a in aux if a in _MODALS]
    if modal:
        return can_ok and modal == ["can"] and form == "base"
    if "had" in aux:
        return False
    if form == "ing":
        if any(a in ("was", "were") for a in aux) and "been" not in aux:
            return False
        return progressive_ok and any(a in ("am", "is", "are", "been") for a in aux)
    if form == "past":
        if any(a in ("have", "has") for a in aux):
            return True           # present perfect: still true
        return rule_past
    if "did" in aux:
        return rule_past
    if any(a in ("was", "were") for a in aux):
        return False
    return form in ("base", "3sg")


def _apply_rules(cl: _Clause, subject: str, first: bool, i: int) -> bool:
    toks, lows = cl.toks, cl.lows
    n = len(lows)
    # "used to" = no longer
    if i + 2 <= n and lows[i:i + 2] == ["used", "to"]:
        return True
    j, aux, negated = _verb_group(lows, i)
    negated = negated or cl.negated
    if j >= n:
        return False
    w = lows[j]
    subj_hints = _PERSON

    # copula rules: I am from X / I am 34 / I am a teacher / I am Ada
    if w in ("am", "is", "are", "was", "were", "been") or (w == "'s" and not first):
        return _be_rules(cl, subject, first, j + 1, w, aux, negated)
    # would like to / tasks and goals
    if w in ("need", "needs", "have", "has", "got") and j + 1 < n and lows[j + 1] == "to":
        if negated or [a for a in aux if a in _MODALS]:
            return True
        return _task(cl, subject, j + 2, "HAS_TASK")
    if "must" in aux and not negated and w in _FORMS and _FORMS[w][1] == "base" \
            and w not in _RULES:
        return _task(cl, subject, j, "HAS_TASK")
    if w in ("want", "wants", "plan", "plans", "planning", "hope", "hopes", "hoping",
             "intend", "intends", "aim", "aims", "like") and j + 1 < n and lows[j + 1] == "to":
        would = "would" in aux
        if negated or (not would and w == "like"):
            if w == "like" and not would:
                pass       # "I like to cook": a preference, below
            else:
                return True
        elif [a for a in aux if a in _MODALS and not (a == "would" and w == "like")]:
            return True
        else:
            return _task(cl, subject, j + 2, "HAS_GOAL")
    if w == "stand" and negated and "can" in aux:
        objects = _split_objects(toks, lows, j + 1, caseless=cl.caseless, name_like=False)
        for obj, _end in objects:
            cl.col.fact(subject, "DISLIKES", obj, f"{subject} cannot stand {obj}", False,
                        subject_hints=subj_hints, object_hints=_PREF)
        return bool(objects)
    if w not in _FORMS:
        return False
    lemma, form = _FORMS[w]
    # "started working at X", "began using X"
    if lemma in ("start", "begin") and j + 1 < n and lows[j + 1] in _FORMS \
            and _FORMS[lows[j + 1]][1] == "ing" and _FORMS[lows[j + 1]][0] in _RULES:
        if negated:
            return True
        lemma = _FORMS[lows[j + 1]][0]
        form, aux = "base", []
        j += 1
    if lemma == "turn" and not negated and j + 1 < n and re.fullmatch(r"\d{1,3}", lows[j + 1]):
        if form in ("past", "base", "3sg") and not aux:
            age = lows[j + 1]
            if 0 < int(age) < 130:
                cl.col.fact(subject, "HAS_AGE", age, f"{subject} is {age} years old", True,
                            subject_hints=subj_hints, object_hints=("age", "trait"))
        personal.birthday(cl, subject, j + 2)
        return True
    if lemma in ("start", "get", "land", "accept", "take") and not negated and \
            (form in ("past", "base", "3sg") and not [a for a in aux if a in _MODALS]
             and (form != "base" or not aux or set(aux) <= {"do", "have", "has"})):
        # "I started a new job at Stripe", "I got a position with Acme"
        k = j + 1
        while k < n and lows[k] in ("a", "an", "the", "new", "full-time", "part-time", "my",
                                    "first", "dream"):
            k += 1
        if k + 1 < n and lows[k] in ("job", "position", "role") and lows[k + 1] in ("at",
                                                                                "with"):
            org = _np(toks, lows, k + 2, caseless=cl.caseless, name_like=True, capital=True)
            if org:
                cl.col.fact(subject, "WORKS_AT", org[0], f"{subject} works at {org[0]}", True,
                            subject_hints=subj_hints, object_hints=_ORG)
                return True
    modal = [a for a in aux if a in _MODALS]
    if not modal and lemma in ("join", "quit") and \
            personal.job_change(cl, subject, j, lemma, form, negated):
        return True
    if not modal and lemma in ("go", "become", "turn") and j + 1 < n and \
            lows[j + 1] in personal.DIETS:
        return personal.diet(cl, subject, j + 1, negated)
    if lemma == "buy":
        return not modal and personal.purchase(cl, subject, j, form, aux, negated)
    if lemma == "go" and form == "ing" and not modal and \
            personal.plan(cl, subject, j, aux, negated):
        return True
    rules = _RULES.get(lemma)
    if not rules:
        return False
    k = j + 1
    for rule in rules:
        if rule.particle and tuple(lows[k:k + len(rule.particle)]) != rule.particle:
            continue
        start = k + len(rule.particle)
        if not rule.particle and start < n and lows[start] in ("in", "at", "on", "to", "for",
                                                               "as", "with", "by") \
                and rule.relation not in ("LIKES", "DISLIKES", "PREFERS"):
            continue
        if not _tense_ok(rule.past, form, aux, rule.progressive, rule.can):
            return True
        relation, phrase = rule.relation, rule.phrase
        if negated:
            if rule.relation == "LIKES" and form in ("base", "3sg") and not aux or \
                    rule.relation == "LIKES" and set(aux) <= {"do", "does"}:
                relation, phrase = "DISLIKES", f"does not {lemma}"
            else:
                return True
        # like/love/hate to X: the gerund ("I love to cook" -> cooking)
        if start < n and lows[start] == "to" and rule.to_phrase:
            if start + 1 < n and lows[start + 1] in _FORMS and _FORMS[lows[start + 1]][1] == \
                    "base" or start + 1 < n and re.fullmatch(r"[a-z]+", lows[start + 1]):
                verb = lows[start + 1]
                if verb in _COGNITION or verb in ("be", "have", "say", "help", "know", "see",
                                                  "hear", "go"):
                    return True
                toks = toks[:start] + [_gerund(verb)] + toks[start + 2:]
                lows = lows[:start] + [_gerund(verb)] + lows[start + 2:]
                n = len(lows)
        objects = _split_objects(toks, lows, start, caseless=cl.caseless,
                                 name_like=rule.name_like, capital=rule.capital)
        if rule.functional:
            objects = objects[:1]
        if not objects:
            return False
        for obj, end in objects:
            if rule.relation == "HAS_AGE":
                continue
            if rule.capital and not (_is_cap(obj) or cl.caseless):
                continue
            if rule.relation == "LIVES_IN" and _lower(obj) in ("home", "town", "city"):
                continue
            context = [lows[end]] if end < n else []
            shown = obj
            if rule.article and start < n and lows[start] in ("a", "an") and not _is_cap(obj):
                shown = ("an " if obj[:1].lower() in "aeiou" else "a ") + obj
            hints = rule.hints + tuple(context)
            if relation in _TASTES and _is_cap(obj):
                hints = ()      # "I love Berlin": Berlin is a place, not a preference type
            cl.col.fact(subject, relation, obj, f"{subject} {phrase} {shown}", rule.functional,
                        subject_hints=subj_hints if relation in _PERSON_SUBJECT else (),
                        object_hints=hints)
            if relation in ("STUDIES", "WORKS_AS"):
                _at_org(cl, subject, end, "STUDIES_AT" if relation == "STUDIES" else "WORKS_AT")
        return True
    return False


def _at_org(cl: _Clause, subject: str, end: int, relation: str) -> None:
    """The "at <Organization>" after "I study X" / "I work as X"."""
    toks, lows = cl.toks, cl.lows
    if end + 1 < len(lows) and lows[end] == "at":
        place = _np(toks, lows, end + 1, caseless=cl.caseless, name_like=True, capital=True)
        if place:
            verb = "studies at" if relation == "STUDIES_AT" else "works at"
            cl.col.fact(subject, relation, place[0], f"{subject} {verb} {place[0]}", True,
                        subject_hints=_PERSON, object_hints=_ORG)


def _be_rules(cl: _Clause, subject: str, first: bool, k: int, be: str, aux: list[str],
              negated: bool) -> bool:
    toks, lows = cl.toks, cl.lows
    n = len(lows)
    past = be in ("was", "were") and not aux
    perfect = be == "been"
    if [a for a in aux if a in _MODALS]:
        return True
    while k < n and lows[k] in _ADVERBS:
        k += 1
    if k < n and lows[k] in _NEGATORS:
        negated = True
        k += 1
        while k < n and lows[k] in _ADVERBS:
            k += 1
    if k < n and lows[k] == "no" and k + 1 < n and lows[k + 1] == "longer":
        negated = True
        k += 2
    subj_hints = _PERSON
    if k >= n:
        return False
    # born in / on
    if lows[k] == "born" and (past or perfect or be in ("was", "were")):
        if negated:
            return True
        if k + 1 < n and lows[k + 1] in ("in", "on"):
            date = _parse_date(toks, lows, k + 2)
            if date or (k + 2 < n and re.fullmatch(r"\d{4}", lows[k + 2])):
                value = date[0] if date else toks[k + 2]
                cl.col.fact(subject, "BORN_ON", value, f"{subject} was born on {value}"
                            if lows[k + 1] == "on" else f"{subject} was born in {value}", True,
                            subject_hints=subj_hints, object_hints=("date",))
                end = k + 2 + (date[1] if date else 1)
                if end + 1 < n and lows[end] == "in":
                    got = _np(toks, lows, end + 1, caseless=cl.caseless, name_like=True,
                              capital=True)
                    if got:
                        cl.col.fact(subject, "BORN_IN", got[0],
                                    f"{subject} was born in {got[0]}", True,
                                    subject_hints=subj_hints, object_hints=_PLACE)
                return True
            got = _np(toks, lows, k + 2, caseless=cl.caseless, name_like=True, capital=True)
            if got:
                cl.col.fact(subject, "BORN_IN", got[0], f"{subject} was born in {got[0]}",
                            True, subject_hints=subj_hints, object_hints=_PLACE)
            return True
        return False
    if past:
        return True
    if personal.diet(cl, subject, k, negated):
        return True
    # have been to X
    if perfect and lows[k] == "to":
        if negated:
            return True
        for obj, _end in _split_objects(toks, lows, k + 1, caseless=cl.caseless,
                                        name_like=True, capital=True):
            if _is_cap(obj) or cl.caseless:
                cl.col.fact(subject, "VISITED", obj, f"{subject} has been to {obj}", False,
                            subject_hints=subj_hints, object_hints=_PLACE)
        return True
    for words, relation, functional, hints, phrase, name_like in _BE_RULES:
        if tuple(lows[k:k + len(words)]) != words:
            continue
        start = k + len(words)
        if negated:
            if relation == "LIKES" and " ".join(words) in _BE_NEGATED_PREF:
                relation, phrase = "DISLIKES", "is not " + " ".join(words)
            else:
                return True
        objects = _split_objects(toks, lows, start, caseless=cl.caseless, name_like=name_like,
                                 capital=relation in ("IS_CALLED",))
        if functional:
            objects = objects[:1]
        for obj, end in objects:
            if relation == "IS_CALLED" and not (_is_cap(obj) or cl.caseless):
                continue
            context = [lows[end]] if end < n else []
            obj_hints = () if relation in _TASTES and _is_cap(obj) else hints + tuple(context)
            cl.col.fact(subject, relation, obj, f"{subject} {phrase} {obj}", functional,
                        subject_hints=subj_hints if relation in _PERSON_SUBJECT else (),
                        object_hints=obj_hints)
        return True
    if negated:
        return True
    # I am 34 (years old)
    if re.fullmatch(r"\d{1,3}", lows[k]):
        rest = lows[k + 1:k + 3]
        if not rest or rest[0] in (",", ".", "!", "and", "now", "today", "this") or \
                rest[:2] == ["years", "old"] or rest[:1] in (["yo"], ["y.o"], ["yrs"]):
            if 0 < int(lows[k]) < 130 and not (rest[:1] and rest[0] in ("years",)
                                               and rest[:2] != ["years", "old"]):
                cl.col.fact(subject, "HAS_AGE", lows[k], f"{subject} is {lows[k]} years old",
                            True, subject_hints=subj_hints, object_hints=("age", "trait"))
                return True
        return False
    # I am a teacher / Anna is a doctor
    if lows[k] in ("a", "an"):
        if k + 1 < n and lows[k + 1] in ("bit", "little", "lot", "kind", "sort", "fan", "big",
                                         "huge", "member", "student"):
            return False
        got = _np(toks, lows, k + 1, caseless=cl.caseless, name_like=False)
        if got and len(got[0].split()) <= 3 and _lower(got[0]).split()[-1] not in _ADJ_OBJECTS:
            obj = got[0]
            art = "an" if obj[:1].lower() in "aeiou" else "a"
            cl.col.fact(subject, "IS_A", obj, f"{subject} is {art} {obj}", False,
                        subject_hints=subj_hints if first or subject in ("User", "Assistant")
                        else _PERSON, object_hints=("occupation", "trait", "role"))
            end = got[1]
            # "a nurse at St Mary's" -> works there; "a student at MIT" -> studies there
            if end + 1 < n and lows[end] == "at" and (_is_cap(toks[end + 1]) or cl.caseless):
                place = _np(toks, lows, end + 1, caseless=cl.caseless, name_like=True,
                            capital=True)
                if place:
                    study = _lower(obj).split()[-1] in ("student", "pupil", "undergrad",
                                                        "undergraduate", "postgrad")
                    relation, verb = ("STUDIES_AT", "studies at") if study else \
                        ("WORKS_AT", "works at")
                    cl.col.fact(subject, relation, place[0], f"{subject} {verb} {place[0]}",
                                True, subject_hints=_PERSON, object_hints=_ORG)
            return True
        return False
    # I am Ada (first person only, the name and nothing more)
    if first and _is_cap(toks[k]) and lows[k] not in _STOP_ANY:
        got = _np(toks, lows, k, caseless=False, name_like=True, capital=True)
        if got:
            name, end = got
            rest_ok = end >= n or toks[end] in (",", ".", "!", "-") or lows[end] in ("and", "but")
            demonym = len(name.split()) == 1 and re.search(r"(ian|ese|ish|ean)$", name.lower())
            if rest_ok and not demonym and len(name.split()) <= 3:
                cl.col.fact(subject, "IS_CALLED", name, f"{subject} is called {name}", True,
                            subject_hints=subj_hints, object_hints=_PERSON)
                return True
    return False


def _try_call_me(cl: _Clause) -> bool:
    lows = cl.lows
    k = 1 if lows[:1] == ["please"] else 0
    if lows[k:k + 2] == ["call", "me"] and k + 2 < len(lows):
        got = _np(cl.toks, lows, k + 2, caseless=cl.caseless, name_like=True, capital=True)
        if got:
            who = cl.me()
            cl.col.fact(who, "IS_CALLED", got[0], f"{who} is called {got[0]}", True,
                        object_hints=_PERSON)
            return True
    return False


def _try_have_named(cl: _Clause, subject: str, i: int) -> bool:
    """I have a dog named Rex / I have two cats called Tom and Jerry."""
    lows, toks = cl.lows, cl.toks
    n = len(lows)
    if i >= n or lows[i] not in ("have", "has", "got"):
        return False
    k = i + 1
    if k < n and lows[k] in ("got",):
        k += 1
    if k < n and (lows[k] in ("a", "an", "one", "two", "three", "four") or lows[k].isdigit()):
        k += 1
    else:
        return False
    role = []
    while k < n and lows[k] not in ("named", "called") and len(role) < 3 and \
            re.fullmatch(r"[^\W\d_][\w\-]*", lows[k]):
        role.append(lows[k])
        k += 1
    if not role or k >= n or lows[k] not in ("named", "called") or cl.negated:
        return False
    head = role[-1]
    if head.endswith("s") and not head.endswith("ss"):
        role[-1] = head[:-1]
    for name, _end in _split_objects(toks, lows, k + 1, caseless=cl.caseless, name_like=True,
                                     capital=True):
        if _is_cap(name) or cl.caseless:
            relation = "HAS_" + _upper_snake(role)
            hints = _PERSON + tuple(role) if role[-1] in _PERSON_ROLES else tuple(role)
            # "a sister named Anna" says nothing of uniqueness: never functional
            cl.col.fact(subject, relation, name, f"{subject}'s {' '.join(role)} is {name}",
                        False, subject_hints=_PERSON, object_hints=hints)
    return True
