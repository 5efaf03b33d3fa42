"""The scripted LLM's small English lexicon and sentence rewriting ('I live in Berlin' spoken
by User -> 'User lives in Berlin')."""

from __future__ import annotations

import re

from memoryplus.testing.scripted_llm.own_text import _STOPWORDS, _norm_text

_PRONOUNS = frozenset(
    'i me my mine myself we us our ours ourselves you your yours he him his she her hers it its '
    'they them their theirs this that these those'.split()
)
_FIRST_PERSON = frozenset('i me my mine myself we us our ours ourselves'.split())
_FP_POSSESSIVE = frozenset({'my', 'our'})

_SKIP_INITIAL = frozenset(
    """
    i the a an my our your his her their its this that these those it we you he she they there
    here what which who whom whose where when why how yes no yeah yep nope hi hello hey thanks
    thank please also and but or so then if now today tonight tomorrow yesterday ok okay well oh
    sure let lets do does did is are was were can could would should will shall may might must
    have has had remember actually anyway after before while since because although though just
    maybe perhaps some any every each all both not never always sometimes often usually in on at
    from to for with by of about as into over under last next first good great nice sorry wow
    cool fine right also again still only even currently recently lately finally btw
    """.split()
)
_TEMPORAL_WORDS = frozenset(
    'monday tuesday wednesday thursday friday saturday sunday january february march april june '
    'july august september october november december'.split()
)
_ALWAYS_SKIP = frozenset({'i', "i'm", "i've", "i'd", "i'll"})
_CONNECTORS = frozenset({'of', 'de', 'da', 'del', 'della', 'van', 'von', 'der', 'den', 'la', 'le', 'du', '&'})
_TITLES = frozenset({'dr', 'mr', 'mrs', 'ms', 'prof', 'st', 'mt', 'sir', 'jr', 'sr'})

_FILLER = frozenset(
    """
    i me we us you he she it they him her them the a an this that these those my our your his
    their its really also still just now currently actually recently already usually often always
    sometimes then too very so even again lately finally totally definitely probably maybe
    here there today tonight tomorrow yesterday anymore
    """.split()
)
_COPULA = frozenset({'is', 'are', 'was', 'were', 'be', 'been', 'being', "'s"})
_MODALS = frozenset({'can', 'cannot', 'could', 'will', 'would', 'shall', 'should', 'may', 'might', 'must'})
_IRREGULAR_PAST = frozenset(
    """
    went was were had did got met bought made took saw came gave found left told said knew thought
    felt ran wrote began became brought sold spent taught won lost flew drove ate drank sent
    built paid kept slept stood sat understood held heard meant broke chose forgot grew rode
    """.split()
)
_CONJ_SPECIAL = {'am': 'is', 'are': 'is', 'have': 'has', 'do': 'does', 'go': 'goes', 'be': 'is', "'m": 'is',
                 "don't": "doesn't", "haven't": "hasn't", "aren't": "isn't", "am not": 'is not'}
_CLAUSE_BREAK_RE = re.compile(r'[,;:()\u2014]|\s-\s|\b(?:and|but|or|so|because|while|although|though|then|which)\b', re.I)
_TERMINATION_RE = re.compile(r'\b(?:used to|no longer|not any ?more|anymore|formerly|previously|former|ex-)\b', re.I)

# Relation heads that naturally hold several targets at once: a new target does not
# contradict an old one ("likes jazz" and "likes Mozart" are both true).
_MULTI_VALUED_HEADS = frozenset(
    {'RELATES_TO', 'LIKES', 'LOVES', 'ENJOYS', 'KNOWS', 'VISITED', 'VISITS', 'MET', 'MEETS',
     'PLAYS', 'SPEAKS', 'READS', 'WATCHES', 'USES', 'OWNS', 'HAS', 'MENTIONS', 'TOLD', 'TELLS',
     'CALLED', 'CALLS', 'ASKED', 'ASKS', 'WENT_TO', 'TALKED_TO'}
)

# HAS_<role> holds one person for most roles (a new dentist replaces the old one), but a
# person has several of these at once: a new niece replaces nobody.
_PLURAL_ROLES = frozenset(
    {'SISTER', 'BROTHER', 'SIBLING', 'COUSIN', 'NIECE', 'NEPHEW', 'AUNT', 'UNCLE', 'FRIEND',
     'COLLEAGUE', 'COWORKER', 'CHILD', 'KID', 'SON', 'DAUGHTER', 'GRANDCHILD', 'GRANDSON',
     'GRANDDAUGHTER', 'NEIGHBOUR', 'NEIGHBOR', 'CLIENT', 'STUDENT', 'TEAMMATE', 'ROOMMATE',
     'PET', 'DOG', 'CAT'})

_PLACE_CUES = frozenset({'in', 'from', 'to', 'near', 'into', 'visit', 'visited', 'visiting', 'around', 'across'})
_ORG_SUFFIXES = frozenset({'inc', 'corp', 'corporation', 'ltd', 'gmbh', 'llc', 'ag', 'co', 'university',
                           'bank', 'company', 'group', 'labs', 'institute', 'college', 'school', 'hospital'})


def _split_camel(name: str) -> list[str]:
    parts = re.sub(r'([a-z0-9])([A-Z])', r'\1 \2', name or '')
    return [p for p in re.split(r'[\s_\-]+', parts) if p]


def _expand_contractions(s: str) -> str:
    s = _norm_text(s)
    s = re.sub(r"\bI'm\b", 'I am', s)
    s = re.sub(r"\bI've\b", 'I have', s)
    s = re.sub(r"\bI'd\b", 'I would', s)
    s = re.sub(r"\bI'll\b", 'I will', s)
    s = re.sub(r"\b([Ww]e)'re\b", r'\1 are', s)
    s = re.sub(r"\b([Ww]e)'ve\b", r'\1 have', s)
    s = re.sub(r"\b([Ww]e)'ll\b", r'\1 will', s)
    s = re.sub(r"\b([Cc])an't\b", r'\1annot', s)
    s = re.sub(r"\b([Ww])on't\b", r'\1ill not', s)
    s = re.sub(r"\b(\w+)n't\b", r'\1 not', s)
    return s


def _looks_past_or_modal(w: str) -> bool:
    w = w.lower()
    return w in _MODALS or w in _IRREGULAR_PAST or w.endswith('ed') or w in {'not', 'to'}


def _third_person(verb: str) -> str:
    v = verb.lower()
    if v in _CONJ_SPECIAL:
        return _CONJ_SPECIAL[v]
    if _looks_past_or_modal(v) or v in _COPULA or not v.isalpha() or "'" in v:
        return v
    if v.endswith(('s', 'sh', 'ch', 'x', 'z', 'o')):
        return v + 'es'
    if len(v) > 1 and v.endswith('y') and v[-2] not in 'aeiou':
        return v[:-1] + 'ies'
    return v + 's'


_ADVERBS = 'really|also|still|just|now|currently|usually|often|never|always|actually|recently|mostly|sometimes'


def rewrite_first_person(sentence: str, speaker: str | None) -> str:
    """'I live in Berlin' spoken by User -> 'User lives in Berlin'."""
    if not speaker:
        return sentence.strip()
    s = _norm_text(sentence)
    s = re.sub(r"\bI'm\b", f'{speaker} is', s)
    s = re.sub(r"\bI've\b", f'{speaker} has', s)
    s = re.sub(r"\bI'd\b", f'{speaker} would', s)
    s = re.sub(r"\bI'll\b", f'{speaker} will', s)
    s = re.sub(r'\bI am\b', f'{speaker} is', s)

    def _conj(m: re.Match) -> str:
        adv, verb = m.group(1) or '', m.group(2)
        return f'{speaker} {adv}{_third_person(verb)}'

    had_i = bool(re.search(r'\bI\s+[A-Za-z]', s))
    s = re.sub(r"\bI\s+((?:" + _ADVERBS + r")\s+)?([A-Za-z]+(?:'[a-z]+)?)(?![\w'])", _conj, s)
    if had_i:
        # "I live in Berlin and work at Acme" -> "... and works at Acme" (elided subject)
        def _conj_elided(m: re.Match) -> str:
            word = m.group(2)
            if word in _STOPWORDS or word in _FILLER or word.endswith(('ly', 's')):
                return m.group(0)
            return f'{m.group(1)} {_third_person(word)}'

        s = re.sub(r'\b(and|but|or|then)\s+([a-z]+)(?=\s+(?:at|in|on|for|with|to|the|a|an|from|as|into|about|'
                   r'near|by|my|our)\b)', _conj_elided, s)
    s = re.sub(r'\bI\b', speaker, s)
    s = re.sub(r'\b[Mm]y\b', f"{speaker}'s", s)
    s = re.sub(r'\b[Mm]ine\b', f"{speaker}'s", s)
    s = re.sub(r'\b[Mm]yself\b', speaker, s)
    s = re.sub(r'\bme\b', speaker, s)
    return s.strip()


def _to_snake(words: list[str]) -> str:
    rel = '_'.join(words).upper()
    rel = re.sub(r'[^A-Z0-9]+', '_', rel).strip('_')
    return rel or 'RELATES_TO'

