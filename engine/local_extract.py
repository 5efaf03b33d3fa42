"""Local extraction: entities and facts from a chat turn with rules, no LLM, no network.

The "local" engine's counterpart of graphiti's LLM extraction. It reads an episode body
("User: ..." / "Assistant: ..." lines) and returns entities typed with the memory mode's
entity types and facts (subject, RELATION, object) with a readable sentence each, in the
shape the engine stores for graphiti-extracted facts.

How it reads:

* Speakers. In User lines "I/my" is User and "you/your" is Assistant; in Assistant lines
  "I/my" is Assistant and "you/your" is User. A capitalised name at the start of a clause
  ("Anna lives in Rome") is a third-person subject.
* Grammar, not phrases. A clause is subject, auxiliaries/negation/adverbs, a verb (any
  form: live/lives/living/lived), a particle and an object. The tense decides: present,
  progressive and present perfect assert a fact; past only for verbs whose past is a
  present state ("moved to", "was born in"); modals, "used to", conditionals, questions
  and negation ("don't", "no longer", "anymore") assert nothing. A negated like/love/enjoy
  is a dislike.
* Functional relations are those where a subject has one object at a time (LIVES_IN,
  WORKS_AT, IS_CALLED, HAS_AGE, DUE_ON, ...); the engine lets a new object supersede the
  old one. "my <role> is X" gives HAS_<ROLE>, functional unless the role is one people
  usually have several of (friend, sister, colleague, dog...), or made unique by "best",
  "favourite", "main"...
* Entities are capitalised names (multi-word, with titles such as Dr), and the objects of
  the rules even when lowercase ("I love cooking" -> cooking). Each is typed with the
  mode's cue words: words of the name, its neighbours, and what the rule says about it
  (the object of "live in" is a place). No cue: the generic type "Entity".

Input longer than MAX_CHARS is cut per speaker at a sentence end, so time stays bounded.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable

from .insights import analyze
from .modes import ModeSpec, mode_spec

MAX_CHARS = 60_000          # text read per extraction (a setting caps turns at 10k tokens)
MAX_FACTS = 200
MAX_ENTITIES = 300
MAX_NAME_TOKENS = 6
MAX_CLAUSE_TOKENS = 60


@dataclass
class LocalEntity:
    name: str
    type: str            # a key of spec.entity_types, or "Entity"


@dataclass
class LocalFact:
    subject: str
    relation: str
    object: str
    fact: str
    functional: bool     # a new object for (subject, relation) replaces the old one


@dataclass
class LocalExtraction:
    entities: list[LocalEntity]
    facts: list[LocalFact]


# ── Vocabulary ───────────────────────────────────────────────────────────────────────────

_TITLES = {"dr", "mr", "mrs", "ms", "miss", "mx", "prof", "professor", "sir", "dame", "st",
           "saint", "capt", "captain", "rev", "fr", "lord", "lady", "judge", "coach"}
_NAME_CONNECTORS = {"of", "de", "del", "della", "der", "den", "van", "von", "da", "di", "du",
                    "la", "le", "el", "bin", "al", "&", "y"}
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december", "jan", "feb", "mar", "apr", "jun",
           "jul", "aug", "sep", "sept", "oct", "nov", "dec")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
             "mon", "tue", "tues", "wed", "thu", "thur", "thurs", "fri", "sat", "sun")

# Capitalised words that are not names on their own (sentence starters, interjections...).
_STOP_CAPS = set("""
a an the and or but so if then than that this these those there here it its i me my mine
you your yours he him his she her hers we us our they them their what when where why how
who whom whose which whether while because since although though unless until after before
also actually anyway anyways well oh ok okay yes yeah yep yup no nope nah sure thanks thank
please sorry hi hello hey hiya greetings dear bye goodbye cheers great good nice cool awesome
perfect fine right wow hmm hm um uh ah aha huh lol haha hehe omg btw fyi imo tbh asap etc
let lets maybe perhaps probably definitely absolutely honestly basically literally really
just only even still already yet again always never sometimes often usually today tomorrow
yesterday tonight now later soon first second third next last finally meanwhile however
therefore besides instead otherwise anyhow indeed of in on at to for from by with about as
into onto over under between through during without within is am are was were be been being
do does did done have has had will would could should can may might must shall not
all any some every each both either neither none nothing everything something anything
many much more most few less least other another such same
user assistant human ai bot system
mon tue tues wed thu thur thurs fri sat sun
birthday morning afternoon evening night day week weekend everyone everybody guys folks
congrats congratulations merry christmas xmas
""".split()) | set(_MONTHS) | set(_WEEKDAYS)
# Capitalised words that may be part of a longer name ("New York", "Great Britain",
# "First National Bank") but are no name alone or at the start of a sentence.
_WEAK_CAPS = set("""
one two three four five six seven eight nine ten hundred thousand first second third
new old big small little long short high low great good happy sad glad excited sorry
tired bored angry upset royal national general central united north south east west
northern southern eastern western upper lower grand saint holy free open
note remember remind tell show give make take get call check try use write read
find help explain describe list add remove update create delete send close keep
see look go come think know say ask want need like love hate enjoy prefer feel
""".split())
# ... of which these may start a name even at the start of a sentence ("New York is big").
_NAME_ADJ = set("""
new old great royal national general central united north south east west northern
southern eastern western upper lower grand saint holy free first big little
""".split())
_STOP_ANY = _STOP_CAPS | _WEAK_CAPS

# Words that never make an object on their own.
_PRONOUNS = set("""
i me you he him she her it we us they them this that these those myself yourself himself
herself itself ourselves themselves yourselves one ones everything something anything
nothing everyone someone anyone nobody somebody anybody everybody all both each either
neither what which who whom whose how when where why whether if stuff things thing lot lots
bit way kind sort type part most more less much many few some any none here there
""".split())
_DETERMINERS = {"the", "a", "an", "some", "any", "another", "every", "each", "no"}
_POSSESSIVES = {"my", "your", "our", "his", "her", "their", "its"}
_DEICTIC = {"this", "that", "these", "those", "such"}
_ADJ_OBJECTS = set("""
good great bad fine ok okay nice cool awesome amazing terrible awful horrible boring
interesting hard easy fun funny weird strange busy tired sure right wrong done ready late
early sorry happy sad glad angry upset excited worried nervous anxious afraid scared bored
confused curious grateful thankful proud lonely stressed sick ill well better worse best
worst free available new old young alive dead hungry thirsty cold hot warm full empty
alone single married back here there home away online offline open closed true false
important possible impossible difficult simple complicated annoying annoyed frustrated
frustrating exhausted glad able unable afraid aware certain sure unsure serious kidding
joking fan big huge little small
""".split())
# Object tokens that end a lowercase noun phrase.
_OBJ_STOP = set("""
with for at in on from to by about because since when while but and or so as than after over
near like via around outside inside
before during until till every each now today yesterday tomorrow tonight anymore lately
recently too also either though although really very much right sometimes usually again
more most instead already still then there here if unless which who that where whenever
nowadays currently ever always never a an is are was were be been will would can could
should might must do does did has have had not especially mostly daily weekly
""".split())
_LIGHT_VERBS = set("""
go do be know see think say ask check try leave stop run get make have come help
understand talk tell hear wait admit mention clarify confirm add note sleep eat work
""".split())
_COGNITION = {"know", "see", "understand", "think", "say", "tell", "ask", "hear", "wonder",
              "figure", "find", "guess", "remember", "believe", "decide"}
# Roles people usually have several of: "my friend is X" does not replace another friend.
_PLURAL_ROLES = set("""
friend brother sister sibling child kid son daughter cousin colleague coworker co-worker
neighbour neighbor classmate teammate pet dog cat hobby interest uncle aunt niece nephew
grandchild grandson granddaughter student client customer employee report roommate
flatmate housemate teacher mentor grandparent fan follower contact acquaintance ex
""".split())
_UNIQUE_MODIFIERS = {"best", "favourite", "favorite", "main", "primary", "only", "eldest",
                     "oldest", "youngest", "twin", "current", "usual", "regular", "family"}
_NOT_CURRENT = {"old", "former", "ex", "previous", "late", "last", "first", "future",
                "potential", "imaginary", "dream"}
_PERSON_ROLES = set("""
wife husband partner spouse girlfriend boyfriend fiance fiancee fiancé fiancée mom mum
mother dad father parent brother sister sibling son daughter child kid cousin uncle aunt
niece nephew grandma grandpa grandmother grandfather grandparent friend colleague coworker
co-worker boss manager supervisor lead dentist doctor gp therapist physician physio
physiotherapist lawyer accountant teacher tutor coach trainer mentor neighbour neighbor
landlord landlady roommate flatmate housemate classmate teammate assistant barber
hairdresser vet pediatrician paediatrician psychiatrist nurse surgeon optician
ophthalmologist dermatologist advisor adviser agent bestie buddy pal mate
""".split())
_HEAD_NOUNS = set("""
project team app repo repository library framework club group meeting launch release
campaign initiative program programme course conference paper study report plan
university college school institute company bank hospital street road avenue lake river
mountain park station airport hotel restaurant cafe museum festival model protocol
""".split())
_NEGATORS = {"not", "never", "no", "hardly", "barely", "neither", "nor"}
_MODALS = {"will", "would", "could", "should", "might", "may", "shall", "can", "must"}
_ADVERBS = set("""
really also still currently now actually absolutely totally just mostly usually definitely
truly so especially generally recently finally even basically honestly personally
genuinely always already officially mainly primarily secretly quite deeply only sometimes
often typically normally certainly seriously happily proudly gladly mostly literally
""".split())
_DISCOURSE = set("""
well so also actually oh btw anyway anyways and but now currently nowadays honestly
basically ok okay yes yeah yep no nope hi hey hello right sure um uh lol haha plus then
alright cool great thanks thank fyi ps incidentally fun fact
""".split())
_DISCOURSE_PHRASES = (
    ("by", "the", "way"), ("just", "so", "you", "know"), ("for", "the", "record"),
    ("in", "fact"), ("as", "it", "happens"), ("these", "days"), ("for", "your", "information"),
    ("fun", "fact"), ("oh", "and"), ("thank", "you"), ("to", "be", "honest"),
    ("at", "the", "moment"), ("right", "now"), ("just", "fyi"))
_MEMO_PHRASES = (("please", "remember"), ("remember",), ("please", "note"), ("note",),
                 ("keep", "in", "mind"), ("do", "not", "forget"), ("never", "forget"),
                 ("for", "future", "reference"), ("just", "so", "you", "know"),
                 ("for", "your", "info"), ("fyi",))
_REPORTING = {"said", "mentioned", "told", "noted", "say", "mention", "tell", "wrote",
              "think", "believe", "guess", "suppose", "know", "remember", "noticed",
              "realized", "realised", "feel"}
_CONDITIONAL = {"if", "unless", "whether", "suppose", "supposing", "imagine", "assuming",
                "when", "whenever", "once", "until", "till", "before", "after", "in case",
                "wish", "hopefully", "maybe", "perhaps"}
_CAUSAL = {"because", "since", "as", "although", "though", "while", "whereas", "cause",
           "cuz", "and", "but", "so", "plus", "or"}
_QUESTION_START = {"do", "does", "did", "is", "are", "was", "were", "can", "could", "would",
                   "will", "should", "shall", "may", "might", "have", "has", "had", "am",
                   "what", "where", "when", "who", "whom", "whose", "why", "how", "which"}

# Verbs: lemma -> (third person, -ing, past, past participle)
_VERBS: dict[str, tuple[str, str, str, str]] = {
    "live": ("lives", "living", "lived", "lived"),
    "reside": ("resides", "residing", "resided", "resided"),
    "move": ("moves", "moving", "moved", "moved"),
    "relocate": ("relocates", "relocating", "relocated", "relocated"),
    "work": ("works", "working", "worked", "worked"),
    "love": ("loves", "loving", "loved", "loved"),
    "like": ("likes", "liking", "liked", "liked"),
    "enjoy": ("enjoys", "enjoying", "enjoyed", "enjoyed"),
    "adore": ("adores", "adoring", "adored", "adored"),
    "prefer": ("prefers", "preferring", "preferred", "preferred"),
    "hate": ("hates", "hating", "hated", "hated"),
    "dislike": ("dislikes", "disliking", "disliked", "disliked"),
    "detest": ("detests", "detesting", "detested", "detested"),
    "loathe": ("loathes", "loathing", "loathed", "loathed"),
    "despise": ("despises", "despising", "despised", "despised"),
    "use": ("uses", "using", "used", "used"),
    "speak": ("speaks", "speaking", "spoke", "spoken"),
    "study": ("studies", "studying", "studied", "studied"),
    "learn": ("learns", "learning", "learned", "learnt"),
    "play": ("plays", "playing", "played", "played"),
    "own": ("owns", "owning", "owned", "owned"),
    "drive": ("drives", "driving", "drove", "driven"),
    "have": ("has", "having", "had", "had"),
    "visit": ("visits", "visiting", "visited", "visited"),
    "go": ("goes", "going", "went", "gone"),
    "travel": ("travels", "travelling", "travelled", "traveled"),
    "join": ("joins", "joining", "joined", "joined"),
    "manage": ("manages", "managing", "managed", "managed"),
    "lead": ("leads", "leading", "led", "led"),
    "build": ("builds", "building", "built", "built"),
    "develop": ("develops", "developing", "developed", "developed"),
    "write": ("writes", "writing", "wrote", "written"),
    "teach": ("teaches", "teaching", "taught", "taught"),
    "turn": ("turns", "turning", "turned", "turned"),
    "need": ("needs", "needing", "needed", "needed"),
    "want": ("wants", "wanting", "wanted", "wanted"),
    "plan": ("plans", "planning", "planned", "planned"),
    "hope": ("hopes", "hoping", "hoped", "hoped"),
    "intend": ("intends", "intending", "intended", "intended"),
    "aim": ("aims", "aiming", "aimed", "aimed"),
    "marry": ("marries", "marrying", "married", "married"),
    "switch": ("switches", "switching", "switched", "switched"),
    "start": ("starts", "starting", "started", "started"),
    "get": ("gets", "getting", "got", "gotten"),
    "land": ("lands", "landing", "landed", "landed"),
    "accept": ("accepts", "accepting", "accepted", "accepted"),
    "take": ("takes", "taking", "took", "taken"),
    "begin": ("begins", "beginning", "began", "begun"),
    "be": ("is", "being", "was", "been"),
    "prepare": ("prepares", "preparing", "prepared", "prepared"),
}
_EXTRA_FORMS = {"traveling": ("travel", "ing"), "traveled": ("travel", "past"),
                "learnt": ("learn", "past"), "am": ("be", "base"), "are": ("be", "base"),
                "were": ("be", "past")}
_FORMS: dict[str, tuple[str, str]] = {}
for _lemma, (_s, _ing, _past, _pp) in _VERBS.items():
    _FORMS.setdefault(_lemma, (_lemma, "base"))
    _FORMS.setdefault(_s, (_lemma, "3sg"))
    _FORMS.setdefault(_ing, (_lemma, "ing"))
    _FORMS.setdefault(_past, (_lemma, "past"))
    _FORMS.setdefault(_pp, (_lemma, "past"))
_FORMS.update(_EXTRA_FORMS)
_AUX = {"do", "does", "did", "am", "is", "are", "was", "were", "have", "has", "had"}


@dataclass(frozen=True)
class _Rule:
    relation: str
    particle: tuple[str, ...] = ()      # words right after the verb ("in"), () = direct object
    functional: bool = False
    hints: tuple[str, ...] = ()         # what the object is (typing cues)
    phrase: str = ""                    # third-person verb phrase for the fact sentence
    past: bool = False                  # simple past asserts a current state ("moved to")
    progressive: bool = True            # "am X-ing" asserts it ("moving to" does not)
    can: bool = False                   # "can X" asserts it (a skill)
    name_like: bool = False             # the object is a proper name (title-cased if caseless)
    capital: bool = False               # the object must be capitalised (a named thing)
    to_phrase: str = ""                 # "like to cook": gerund object ("cooking")
    article: bool = False               # "works as a nurse": keep the article in the sentence


_PLACE = ("place", "city")
_ORG = ("organization", "company")
_PREF = ("preference", "interest", "activity", "hobby")
_PERSON = ("person",)

_RULES: dict[str, tuple[_Rule, ...]] = {
    "live": (_Rule("LIVES_IN", ("in",), True, _PLACE, "lives in", name_like=True),
             _Rule("LIVES_IN", ("on",), True, _PLACE, "lives on", name_like=True,
                   capital=True),
             _Rule("LIVES_WITH", ("with",), False, _PERSON, "lives with", name_like=True)),
    "reside": (_Rule("LIVES_IN", ("in",), True, _PLACE, "lives in", name_like=True),),
    "move": (_Rule("LIVES_IN", ("to",), True, _PLACE, "lives in", past=True,
                   progressive=False, name_like=True),),
    "relocate": (_Rule("LIVES_IN", ("to",), True, _PLACE, "lives in", past=True,
                       progressive=False, name_like=True),),
    "work": (_Rule("WORKS_AT", ("at",), True, _ORG, "works at", name_like=True),
             _Rule("WORKS_AT", ("for",), True, _ORG, "works for", name_like=True),
             _Rule("WORKS_AS", ("as",), True, ("occupation", "trait", "skill"), "works as",
                   article=True),
             _Rule("WORKS_ON", ("on",), False, ("project", "task"), "works on")),
    "love": (_Rule("LIKES", (), False, _PREF, "loves", to_phrase="loves"),),
    "adore": (_Rule("LIKES", (), False, _PREF, "adores", to_phrase="adores"),),
    "like": (_Rule("LIKES", (), False, _PREF, "likes", to_phrase="likes"),),
    "enjoy": (_Rule("LIKES", (), False, _PREF, "enjoys"),),
    "prefer": (_Rule("PREFERS", (), False, _PREF, "prefers", to_phrase="prefers"),),
    "hate": (_Rule("DISLIKES", (), False, _PREF, "hates", to_phrase="hates"),),
    "dislike": (_Rule("DISLIKES", (), False, _PREF, "dislikes"),),
    "detest": (_Rule("DISLIKES", (), False, _PREF, "detests"),),
    "loathe": (_Rule("DISLIKES", (), False, _PREF, "loathes"),),
    "despise": (_Rule("DISLIKES", (), False, _PREF, "despises"),),
    "use": (_Rule("USES", (), False, ("tool", "software"), "uses"),),
    "speak": (_Rule("SPEAKS", (), False, ("language", "trait", "skill"), "speaks", can=True,
                    capital=True),),
    "study": (_Rule("STUDIES_AT", ("at",), True, ("organization", "university"),
                    "studies at", name_like=True),
              _Rule("STUDIES", (), False, ("concept", "interest", "skill"), "studies")),
    "learn": (_Rule("LEARNING", (), False, ("skill", "language", "interest", "concept"),
                    "is learning"),),
    "play": (_Rule("PLAYS", (), False, ("interest", "hobby", "activity", "sport"), "plays",
                   can=True),),
    "own": (_Rule("OWNS", (), False, ("thing", "product"), "owns"),),
    "drive": (_Rule("DRIVES", (), False, ("thing", "car"), "drives", capital=True),),
    "have": (_Rule("OWNS", (), False, ("thing", "product"), "has", capital=True),),
    "visit": (_Rule("VISITED", (), False, _PLACE, "visited", past=True, name_like=True,
                    capital=True),),
    "go": (_Rule("VISITED", ("to",), False, _PLACE, "went to", past=True, progressive=False,
                 name_like=True, capital=True),
           _Rule("IS_CALLED", ("by",), True, _PERSON, "goes by", name_like=True)),
    "travel": (_Rule("VISITED", ("to",), False, _PLACE, "travelled to", past=True,
                     progressive=False, name_like=True, capital=True),),
    "join": (_Rule("MEMBER_OF", (), False, _ORG, "joined", past=True, name_like=True,
                   capital=True),),
    "manage": (_Rule("MANAGES", (), False, (), "manages"),),
    "lead": (_Rule("MANAGES", (), False, (), "leads"),),
    "build": (_Rule("WORKS_ON", (), False, ("project",), "is building"),),
    "develop": (_Rule("WORKS_ON", (), False, ("project",), "is developing"),),
    "write": (_Rule("WORKS_ON", (), False, ("project",), "is writing"),),
    "teach": (_Rule("TEACHES", (), False, ("concept", "skill", "interest"), "teaches"),),
    "marry": (_Rule("MARRIED_TO", (), True, _PERSON, "is married to", past=True,
                    progressive=False, name_like=True, capital=True),),
    "switch": (_Rule("USES", ("to",), False, ("tool", "software"), "uses", past=True),),
}
# "be" + words: (words, relation, functional, hints, phrase, name_like)
_BE_RULES: tuple[tuple[tuple[str, ...], str, bool, tuple[str, ...], str, bool], ...] = (
    (("from",), "IS_FROM", True, _PLACE, "is from", True),
    (("based", "in"), "LIVES_IN", True, _PLACE, "lives in", True),
    (("living", "in"), "LIVES_IN", True, _PLACE, "lives in", True),
    (("married", "to"), "MARRIED_TO", True, _PERSON, "is married to", True),
    (("engaged", "to"), "ENGAGED_TO", True, _PERSON, "is engaged to", True),
    (("employed", "at"), "WORKS_AT", True, _ORG, "works at", True),
    (("employed", "by"), "WORKS_AT", True, _ORG, "works for", True),
    (("allergic", "to"), "ALLERGIC_TO", False, ("allergy", "trait", "health"),
     "is allergic to", False),
    (("interested", "in"), "INTERESTED_IN", False, _PREF, "is interested in", False),
    (("into",), "LIKES", False, _PREF, "is into", False),
    (("a", "big", "fan", "of"), "LIKES", False, _PREF, "is a fan of", False),
    (("a", "huge", "fan", "of"), "LIKES", False, _PREF, "is a fan of", False),
    (("a", "fan", "of"), "LIKES", False, _PREF, "is a fan of", False),
    (("fond", "of"), "LIKES", False, _PREF, "is fond of", False),
    (("called",), "IS_CALLED", True, _PERSON, "is called", True),
    (("named",), "IS_CALLED", True, _PERSON, "is called", True),
    (("member", "of"), "MEMBER_OF", False, _ORG, "is a member of", True),
    (("a", "member", "of"), "MEMBER_OF", False, _ORG, "is a member of", True),
    (("studying", "at"), "STUDIES_AT", True, ("organization", "university"), "studies at", True),
    (("a", "student", "at"), "STUDIES_AT", True, ("organization", "university"), "studies at",
     True),
)
_BE_NEGATED_PREF = {"into", "a fan of", "fond of", "a big fan of", "a huge fan of"}

_TASTES = {"LIKES", "DISLIKES", "PREFERS", "INTERESTED_IN"}

# Relation -> typing hint for a third-person subject (the subject is a person).
_PERSON_SUBJECT = {"LIVES_IN", "LIVES_WITH", "IS_FROM", "BORN_IN", "BORN_ON", "WORKS_AT",
                   "WORKS_AS", "IS_CALLED", "HAS_AGE", "MARRIED_TO", "ENGAGED_TO",
                   "STUDIES_AT", "LIKES", "DISLIKES", "PREFERS", "INTERESTED_IN",
                   "ALLERGIC_TO", "SPEAKS", "STUDIES", "LEARNING", "PLAYS", "HAS_TASK",
                   "HAS_GOAL", "VISITED", "GAVE_INSTRUCTION", "TEACHES", "IS_A", "MANAGES",
                   "DRIVES", "LIVES_WITH"}

# ── Text preparation ─────────────────────────────────────────────────────────────────────

_LABEL = re.compile(r"(?im)^[ \t]*(user|assistant|human|ai|bot|system)[ \t]*:[ \t]?")
_TOKEN = re.compile(
    r"https?://\S+"
    r"|[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+"
    r"|\d+(?:[.,:/\-]\d+)*(?:st|nd|rd|th|%|k|am|pm)?\b"
    r"|[^\W\d_](?:[\w'\-]*\w)?[+#]*"
    r"|[^\w\s]")
_CONTRACTIONS = [
    (re.compile(r"\b([Cc]a)n'?t\b"), r"\1n not"),
    (re.compile(r"\b([Ww])on't\b"), r"\1ill not"),
    (re.compile(r"\b(\w+)n't\b"), r"\1 not"),
    (re.compile(r"\b(do|does|did|is|are|was|were|have|has|had|would|could|should)nt\b",
                re.I), r"\1 not"),
    (re.compile(r"\b([Ii])'?m\b"), r"\1 am"),
    (re.compile(r"\b([Ii])'ve\b"), r"\1 have"),
    (re.compile(r"(\w)'ve\b"), r"\1 have"),
    (re.compile(r"\b([Ii])'ll\b"), r"\1 will"),
    (re.compile(r"(\w)'ll\b"), r"\1 will"),
    (re.compile(r"\b([Ii]|you|we|they|he|she)'d\b", re.I), r"\1 would"),
    (re.compile(r"(\w)'re\b"), r"\1 are"),
    (re.compile(r"\b(it|that|he|she|there|what|who|where|here|this)'s\b", re.I), r"\1 is"),
    (re.compile(r"\b([Ll])et's\b"), r"\1et us"),
    (re.compile(r"\b([Gg])onna\b"), r"\1oing to"),
    (re.compile(r"\b([Ww])anna\b"), r"\1ant to"),
    (re.compile(r"\b([Gg])otta\b"), r"\1ot to"),
]
_TITLE_DOT = re.compile(r"\b(Dr|Mr|Mrs|Ms|Mx|Prof|St|Jr|Sr|Mt|Capt|Rev|Fr)\.(?=\s)", re.I)
_SENT_BOUNDARY = re.compile(r"[.!?…]+[\"')\]]*(?=\s|$)|\n+")
_ABBREV = {"dr", "mr", "mrs", "ms", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e",
           "inc", "ltd", "co", "no", "approx", "dept", "mt", "ave", "rd", "fig", "u.s", "eg",
           "ie", "cf", "al"}


def _lower(text: str) -> str:
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    text = (text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
            .replace("\u00a0", " "))
    text = _TITLE_DOT.sub(r"\1", text)
    for pattern, repl in _CONTRACTIONS:
        text = pattern.sub(repl, text)
    return text


def _blocks(body: str) -> list[tuple[str, str]]:
    """(speaker, text) blocks; speaker is "User" or "Assistant" (system lines are dropped)."""
    out: list[tuple[str, str]] = []
    matches = list(_LABEL.finditer(body))
    if not matches:
        return [("User", body)] if body.strip() else []
    if body[:matches[0].start()].strip():
        out.append(("User", body[:matches[0].start()]))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(body)
        role = m.group(1).lower()
        if role == "system":
            continue
        speaker = "User" if role in ("user", "human") else "Assistant"
        out.append((speaker, body[m.end():end]))
    return out


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[:limit]
    stop = max(head.rfind(". "), head.rfind("! "), head.rfind("? "), head.rfind("\n"))
    return head[:stop + 1] if stop > limit // 2 else head


def _bounded_blocks(body: str) -> list[tuple[str, str]]:
    blocks = _blocks(body)
    total = sum(len(t) for _, t in blocks)
    if total <= MAX_CHARS:
        return blocks
    # Share the budget between speakers so a huge paste cannot crowd out the other lines.
    blocks = blocks[:200]
    share = max(MAX_CHARS // max(len(blocks), 1), 500)
    out, used = [], 0
    for speaker, text in blocks:
        if used >= MAX_CHARS:
            break
        piece = _cut(text, min(share, MAX_CHARS - used))
        out.append((speaker, piece))
        used += len(piece)
    return out


def _sentences(text: str) -> list[str]:
    out, start = [], 0
    for m in _SENT_BOUNDARY.finditer(text):
        if m.group(0)[0] == ".":
            before = text[start:m.start()].rsplit(None, 1)
            word = before[-1].lower() if before else ""
            if word in _ABBREV or (len(word) == 1 and word.isalpha()):
                continue
        piece = text[start:m.end()].strip()
        if piece:
            out.append(piece)
        start = m.end()
    rest = text[start:].strip()
    if rest:
        out.append(rest)
    return out


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


# ── Small helpers ───────────────────────────────────────────────────────────────────────

def _is_cap(tok: str) -> bool:
    """A token that can be (part of) a proper name: Berlin, iPhone, NASA, Zoë, Łódź."""
    if not tok or not tok[0].isalpha():
        return False
    if tok[0].isupper():
        return True
    return any(c.isupper() for c in tok[1:]) and tok[0].islower()   # iPhone, macOS, eBay


def _is_word(tok: str) -> bool:
    return bool(tok) and (tok[0].isalnum())


def _clean_name(words: list[str]) -> str:
    name = " ".join(words).strip(" -'\"")
    if name.endswith("'s"):
        name = name[:-2]
    return name


def _title(words: list[str]) -> list[str]:
    return [w if w.lower() in _NAME_CONNECTORS else w[:1].upper() + w[1:] for w in words]


def _gerund(verb: str) -> str:
    v = verb.lower()
    if v.endswith("ie"):
        return v[:-2] + "ying"
    if v.endswith("e") and not v.endswith(("ee", "ye", "oe")) and len(v) > 2:
        return v[:-1] + "ing"
    if (len(v) <= 4 and len(v) >= 3 and v[-1] not in "aeiouwxy" and v[-2] in "aeiou"
            and v[-3] not in "aeiou"):
        return v + v[-1] + "ing"
    return v + "ing"


def _upper_snake(words: Iterable[str]) -> str:
    out = re.sub(r"[^A-Za-z0-9]+", "_", "_".join(words)).strip("_").upper()
    return re.sub(r"FAVORITE", "FAVOURITE", out)


_SEASONS = {"spring", "summer", "autumn", "fall", "winter"}
_DATE_WORDS = set(_WEEKDAYS) | {"today", "tonight", "tomorrow", "eod", "eow", "eom", "noon",
                                "midnight"}


def _parse_date(toks: list[str], lows: list[str], i: int) -> tuple[str, int] | None:
    """A date expression at toks[i:], as (display text, tokens used)."""
    j = i
    n = len(toks)
    if j < n and lows[j] in ("on", "by", "before", "at", "for"):
        j += 1
    if j >= n:
        return None
    w = lows[j]
    if w == "the" and j + 1 < n and lows[j + 1] in ("end", "day") :
        j += 1
        w = lows[j]
    if w in ("next", "this", "coming", "following") and j + 1 < n:
        nxt = lows[j + 1]
        if nxt in _WEEKDAYS or nxt in _SEASONS or nxt in ("week", "month", "year", "weekend",
                                                          "quarter", "sprint"):
            words = [w, toks[j + 1].capitalize() if nxt in _WEEKDAYS else nxt]
            return " ".join(words), j + 2 - i
        return None
    if w in _DATE_WORDS:
        return (toks[j].capitalize() if w in _WEEKDAYS else toks[j]), j + 1 - i
    if w in _SEASONS:
        return w, j + 1 - i
    if w == "end" and j + 2 < n and lows[j + 1] == "of":
        k = j + 2
        if lows[k] in ("the", "this", "next") and k + 1 < n:
            k += 1
        if lows[k] in ("day", "week", "month", "quarter", "year", "sprint") or \
                re.fullmatch(r"q[1-4]", lows[k]) or lows[k] in _MONTHS:
            text = " ".join(toks[j:k + 1])
            del text
            rest = [t for t in toks[j + 2:k + 1] if t.lower() != "the"]
            return "end of " + " ".join(rest), k + 1 - i
        return None
    if re.fullmatch(r"q[1-4]", w):
        if j + 1 < n and re.fullmatch(r"\d{4}", lows[j + 1]):
            return f"{toks[j].upper()} {toks[j + 1]}", j + 2 - i
        return toks[j].upper(), j + 1 - i
    if w in _MONTHS:
        k = j + 1
        parts = [toks[j].capitalize()]
        if k < n and re.fullmatch(r"\d{1,2}(st|nd|rd|th)?", lows[k]):
            parts.append(toks[k])
            k += 1
            if k + 1 < n and lows[k] == "," and re.fullmatch(r"\d{4}", lows[k + 1]):
                parts.append(toks[k + 1])
                k += 2
            elif k < n and re.fullmatch(r"\d{4}", lows[k]):
                parts.append(toks[k])
                k += 1
        elif k < n and re.fullmatch(r"\d{4}", lows[k]):
            parts.append(toks[k])
            k += 1
        return " ".join(parts), k - i
    if re.fullmatch(r"\d{1,2}(st|nd|rd|th)?", w):
        k = j + 1
        if k < n and lows[k] == "of":
            k += 1
        if k < n and lows[k] in _MONTHS:
            parts = [toks[j], toks[k].capitalize()]
            k += 1
            if k < n and re.fullmatch(r"\d{4}", lows[k]):
                parts.append(toks[k])
                k += 1
            return " ".join(parts), k - i
        return None
    if re.fullmatch(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.]\d{1,2}(?:[/.]\d{2,4})?", w):
        return toks[j], j + 1 - i
    if w == "in" and j + 2 < n and re.fullmatch(r"\d+|a|an|two|three|few", lows[j + 1]) \
            and lows[j + 2].rstrip("s") in ("day", "week", "month", "hour"):
        return " ".join(toks[j:j + 3]), j + 3 - i
    return None


# ── The extraction state ─────────────────────────────────────────────────────────────────

class _Collector:
    def __init__(self, spec: ModeSpec):
        self.spec = spec
        self.entities: dict[str, LocalEntity] = {}
        self.scores: dict[str, int] = {}
        self.facts: dict[tuple[str, str, str], LocalFact] = {}
        self.cue_index: list[tuple[str, frozenset[str]]] = [
            (t, frozenset(c)) for t, c in spec.cues.items() if t not in ("Emotion", "Topic")]

    def type_for(self, name: str, context: Iterable[str] = (), hints: Iterable[str] = (),
                 own_words: bool = True) -> tuple[str, int]:
        """The best-cued entity type and its score: words of the name and its neighbours
        count 1, hints (what a rule says the entity is) count 2; no cue: "Entity"."""
        own = [w for w in re.split(r"[\s\-]+", _lower(name)) if w] if own_words else []
        words = set(own) | {w for w in context if w}
        head = own[-1] if len(own) > 1 else ""       # "data platform team" is a team
        hint_set = set(hints)
        best, best_score = "Entity", 0
        for type_name, cues in self.cue_index:
            score = len(words & cues) + 2 * len(hint_set & cues) + (head in cues)
            if score > best_score:
                best, best_score = type_name, score
        return best, best_score

    def entity(self, name: str, context: Iterable[str] = (), hints: Iterable[str] = (),
               own_words: bool = True) -> None:
        if not name:
            return
        key = _lower(name)
        type_name, score = self.type_for(name, context, hints, own_words)
        current = self.entities.get(key)
        if current is None:
            if len(self.entities) >= MAX_ENTITIES:
                return
            self.entities[key] = LocalEntity(name, type_name)
            self.scores[key] = score
        elif score > self.scores.get(key, 0):
            current.type = type_name
            self.scores[key] = score

    def fact(self, subject: str, relation: str, obj: str, sentence: str, functional: bool,
             subject_hints: Iterable[str] = (), object_hints: Iterable[str] = (),
             phrase_subject: bool = False, phrase_object: bool = False) -> None:
        if not subject or not obj or _lower(subject) == _lower(obj):
            return
        if len(self.facts) >= MAX_FACTS:
            return
        # the same entity keeps one spelling ("EOD" mentioned, "eod" as a date)
        for old, known in ((subject, self.entities.get(_lower(subject))),
                           (obj, self.entities.get(_lower(obj)))):
            if known and known.name != old:
                sentence = sentence.replace(old, known.name)
                subject = known.name if old is subject else subject
                obj = known.name if old is obj else obj
        if functional:
            # Within one turn the later statement of a functional relation wins.
            for key in [k for k in self.facts if k[0] == _lower(subject) and k[1] == relation]:
                del self.facts[key]
        key = (_lower(subject), relation, _lower(obj))
        self.facts.pop(key, None)
        self.facts[key] = LocalFact(subject, relation, obj, sentence, functional)
        if subject in ("User", "Assistant"):
            self.entity(subject, hints=("person",))
        else:
            self.entity(subject, hints=subject_hints, own_words=not phrase_subject)
        self.entity(obj, hints=object_hints, own_words=not phrase_object)

    def result(self) -> LocalExtraction:
        used = {_lower(f.subject) for f in self.facts.values()} | \
               {_lower(f.object) for f in self.facts.values()}
        # A bare mention that only starts a fact's longer name ("Italian" of "Italian food").
        prefixes = {" ".join(u.split()[:k]) for u in used for k in range(1, len(u.split()))}
        entities = [e for k, e in self.entities.items()
                    if (e.name not in ("User", "Assistant") or k in used)
                    and (k in used or k not in prefixes or e.type in ("Emotion", "Topic"))]
        return LocalExtraction(entities=entities, facts=list(self.facts.values()))


# ── Names in running text ───────────────────────────────────────────────────────────────

_OPENERS = {":", "—", "–", "-", "*", "•", ">"}


def _name_runs(toks: list[str], lows: list[str], sentence_start: int = 0,
               lowercase_elsewhere: frozenset[str] = frozenset()) -> list[tuple[int, int]]:
    """(start, end) token spans of capitalised names."""
    spans = []
    i, n = 0, len(toks)
    while i < n:
        tok = toks[i]
        low = lows[i]
        initial = i == sentence_start or (sentence_start >= 0 and i > 0
                                          and toks[i - 1] in _OPENERS)
        title = low in _TITLES and i + 1 < n and _is_cap(toks[i + 1]) and tok[0].isupper()
        weak_start = low in _WEAK_CAPS and (not initial or low in _NAME_ADJ) and \
            i + 1 < n and _is_cap(toks[i + 1]) and lows[i + 1] not in _STOP_ANY
        if not (_is_cap(tok) or title) or (low in _STOP_ANY and not title and not weak_start):
            i += 1
            continue
        j = i + 1
        while j < n:
            if _is_cap(toks[j]) and lows[j] not in _STOP_CAPS and lows[j] != "i":
                j += 1
            elif re.fullmatch(r"\d+(?:\.\d+)*", toks[j]) and j > i:
                j += 1          # Windows 11, iPhone 15
                break
            elif lows[j] in _NAME_CONNECTORS and j + 1 < n and _is_cap(toks[j + 1]) \
                    and lows[j + 1] not in _STOP_ANY:
                j += 2
            else:
                break
        start = i
        # A capitalised sentence start is a name only with evidence: more words of a name,
        # a verb that takes a person or thing as subject ("Anna loves", "Priya said"), or a
        # possessive; never when the same word appears lowercase elsewhere in the turn.
        if initial and j - start == 1 and not title:
            nxt = lows[j] if j < n else ""
            # "Priya said", "Anna loves" (not "Dust is": a copula follows any noun)
            verbish = nxt in _REPORTING or (
                nxt in _FORMS and _FORMS[nxt][1] in ("3sg", "past") and _FORMS[nxt][0] != "be"
                and nxt not in ("has", "had"))
            if low in lowercase_elsewhere or not (verbish or tok.endswith("'s")):
                i = j
                continue
        if j - start <= MAX_NAME_TOKENS:
            spans.append((start, j))
        i = j
    return spans


def _mention_names(sentence_toks: list[str], sentence_lows: list[str], col: _Collector,
                   lowercase_words: frozenset[str]) -> None:
    first = next((k for k, t in enumerate(sentence_toks) if _is_word(t)), 0)
    for start, end in _name_runs(sentence_toks, sentence_lows, first, lowercase_words):
        words = list(sentence_toks[start:end])
        if end < len(sentence_toks) and sentence_lows[end] in _HEAD_NOUNS:
            words.append(sentence_toks[end])
        name = _clean_name(words)
        if not _valid_name(name):
            continue
        if " " not in name and ((name.isupper() and len(name) <= 2)
                                or _lower(name) in _PERSON_ROLES):
            continue        # "my GP", "ask Mom": a role, not a name
        context = [sentence_lows[start - 1] if start > 0 else "",
                   sentence_lows[end] if end < len(sentence_lows) else "",
                   sentence_lows[end + 1] if end + 1 < len(sentence_lows) else ""]
        col.entity(name, context)


def _valid_name(name: str) -> bool:
    if len(name) < 2 or not any(c.isalpha() for c in name):
        return False
    words = _lower(name).split()
    if all(w in _STOP_ANY or w in _TITLES for w in words):
        return False
    if words[0] in _PRONOUNS or words[0] in _DETERMINERS:
        return False
    return len(words) <= MAX_NAME_TOKENS


# ── Objects ─────────────────────────────────────────────────────────────────────────────

def _np(toks: list[str], lows: list[str], i: int, *, caseless: bool, name_like: bool,
        capital: bool = False, possessor: str = "") -> tuple[str, int] | None:
    """The noun phrase starting at toks[i]: (text, end index) or None when it is no entity."""
    n = len(toks)
    while i < n and lows[i] in _DETERMINERS:
        i += 1
    if i >= n or not _is_word(toks[i]):
        return None
    low = lows[i]
    if low in _DEICTIC or low in _PRONOUNS or low in _POSSESSIVES:
        if low in _POSSESSIVES and i + 2 < n and lows[i + 1] not in _OBJ_STOP:
            # "my sister Anna" / "my dentist Dr Okafor" -> the name
            for k in (i + 2, i + 3):
                if k < n and (_is_cap(toks[k]) or lows[k] in _TITLES):
                    run = _name_runs(toks, lows, -1)
                    for s, e in run:
                        if s == k:
                            return _clean_name(toks[s:e]), e
        return None
    title_start = low in _TITLES and i + 1 < n and toks[i + 1][:1].isalpha()
    if _is_cap(toks[i]) or title_start or re.match(r"\d", toks[i]):
        j = i + 1
        while j < n:
            if _is_cap(toks[j]) or (title_start and j == i + 1) or \
                    re.fullmatch(r"\d+(?:\.\d+)*", toks[j]):
                j += 1
            elif lows[j] in _NAME_CONNECTORS and j + 1 < n and _is_cap(toks[j + 1]):
                j += 2
            else:
                break
        if j < n and lows[j] in _HEAD_NOUNS:
            j += 1
        elif not name_like and j < n and _is_word(toks[j]) and toks[j].islower() and \
                lows[j] not in _OBJ_STOP and lows[j] not in _PRONOUNS and \
                lows[j] not in _ADJ_OBJECTS and lows[j] not in _FORMS and \
                (j + 1 >= n or not _is_word(toks[j + 1]) or lows[j + 1] in _OBJ_STOP):
            j += 1          # "Italian food", "Zelda games", "Python scripts"
        words = list(toks[i:j])
        if title_start or caseless and name_like:
            words = _title(words)
        name = _clean_name(words)
        if re.fullmatch(r"\d+(?:[.,]\d+)?", name) and not capital:
            return None
        return (name, j) if _valid_name(name) or re.match(r"\d", name) else None
    if (capital or name_like) and not caseless:
        return None
    # A lowercase noun phrase: up to four words, stopping at prepositions, adverbs...
    j = i
    words: list[str] = []
    while j < n and len(words) < 5:
        lw = lows[j]
        if not _is_word(toks[j]) or lw in _OBJ_STOP or lw in _POSSESSIVES \
                or (lw in _PRONOUNS and words) or (lw == "of" and not words):
            break
        words.append(toks[j])
        j += 1
        if lw == "of":
            while j < n and lows[j] in _DETERMINERS:
                j += 1
    while words and (_lower(words[-1]) in _OBJ_STOP or _lower(words[-1]) == "of"):
        words.pop()
    if not words or len(words) > 4:
        return None
    if j < n and _is_word(toks[j]) and lows[j] not in _OBJ_STOP and lows[j] not in _POSSESSIVES \
            and lows[j] not in _PRONOUNS and len(words) >= 4:
        return None      # runs on: a clause, not a name
    low_words = [_lower(w) for w in words]
    if low_words[0] in _PRONOUNS or low_words[-1] in _PRONOUNS:
        return None
    if len(low_words) == 1 and (low_words[0] in _ADJ_OBJECTS or low_words[0] in _STOP_ANY
                                and low_words[0] not in _PREF_OK):
        return None
    if low_words[0] in _ADJ_OBJECTS and len(low_words) <= 2 and low_words[-1] in _ADJ_OBJECTS:
        return None
    if low_words[0] in ("going", "doing", "getting", "having", "making", "being", "trying",
                        "taking", "coming", "it"):
        if len(low_words) == 1:
            return None
    if caseless and name_like:
        words = _title(words)
    return " ".join(words), j


_PREF_OK = {"reading", "writing", "music", "art"}


def _split_objects(toks: list[str], lows: list[str], i: int, **kw) -> list[tuple[str, int]]:
    """Coordinated objects: "hiking, cooking and jazz" -> three noun phrases."""
    out = []
    n = len(toks)
    while i < n:
        got = _np(toks, lows, i, **kw)
        if got is None:
            break
        out.append(got)
        j = got[1]
        if j < n and toks[j] == "," and j + 1 < n and lows[j + 1] in ("and", "or"):
            i = j + 2
        elif j < n and (toks[j] == "," or lows[j] in ("and", "or", "&")):
            i = j + 1
        else:
            break
    return out


# ── Clauses ─────────────────────────────────────────────────────────────────────────────

_SPLIT_PUNCT = {";", ":", "—", "–", "(", ")", "\"", "…"}


def _starts_clause(lows: list[str], toks: list[str], i: int) -> bool:
    if i >= len(lows):
        return False
    while i + 1 < len(lows) and lows[i] in _ADVERBS | {"then", "now"}:
        i += 1            # "..., but now I live in Paris"
    w = lows[i]
    nxt = lows[i + 1] if i + 1 < len(lows) else ""
    if w in ("i", "you", "he", "she", "we", "they", "it", "there"):
        return True
    if w in ("my", "your", "our", "his", "her", "their") and nxt:
        return any(lows[k] in ("is", "are", "was", "were", "has")
                   for k in range(i + 1, min(i + 5, len(lows))))
    if w in _FORMS or w in _AUX or w in _MODALS:
        return True
    if _is_cap(toks[i]) and nxt in _FORMS and _FORMS[nxt][1] in ("3sg", "past"):
        return True
    if _is_cap(toks[i]) and nxt in ("is", "was", "has"):
        return True
    return False


def _clauses(toks: list[str], lows: list[str]) -> list[tuple[int, int, bool]]:
    """(start, end, coordinated) token spans; coordinated clauses may inherit a subject."""
    spans: list[tuple[int, int, bool]] = []
    start, coordinated = 0, False
    i, n = 0, len(toks)
    while i < n:
        t, w = toks[i], lows[i]
        cut = None
        if t in _SPLIT_PUNCT or (t == "-" and i > 0):
            cut, nxt_start, coord = i, i + 1, False
        elif t == ",":
            k = i + 1
            if k < n and lows[k] in ("and", "but", "so", "or", "plus", "then"):
                k += 1
            if _starts_clause(lows, toks, k) or (k < n and lows[k] in _CONDITIONAL | _CAUSAL):
                cut, nxt_start, coord = i, i + 1, True
        elif w in ("and", "but", "so", "plus", "then", "or") and i > start:
            if _starts_clause(lows, toks, i + 1):
                cut, nxt_start, coord = i, i, True
        elif w in _CONDITIONAL or w in ("because", "since", "although", "though", "whereas",
                                        "cause", "cuz"):
            if i > start and w not in ("hopefully", "maybe", "perhaps", "before", "after"):
                cut, nxt_start, coord = i, i, False
        if cut is not None:
            if cut > start:
                spans.append((start, cut, coordinated))
            start, coordinated = nxt_start, coord
        i += 1
    if start < n:
        spans.append((start, n, coordinated))
    return spans


def _strip_discourse(toks: list[str], lows: list[str]) -> tuple[list[str], list[str], str]:
    """Drop leading fillers; returns the tokens and the kind of clause ("", "conditional")."""
    i, n = 0, len(toks)
    changed = True
    while changed and i < n:
        changed = False
        while i < n and not _is_word(toks[i]):
            i += 1
            changed = True
        for phrase in _DISCOURSE_PHRASES:
            if tuple(lows[i:i + len(phrase)]) == phrase:
                i += len(phrase)
                changed = True
        if i < n and lows[i] in _CONDITIONAL:
            return toks[i:], lows[i:], "conditional"
        if i < n and (lows[i] in _DISCOURSE or lows[i] in _CAUSAL):
            i += 1
            changed = True
        # "Remember that ...", "note: ...", "keep in mind that ..."
        for phrase in _MEMO_PHRASES:
            if tuple(lows[i:i + len(phrase)]) == phrase:
                k = i + len(phrase)
                while k < n and lows[k] in ("that", ",", ":", "-", "—"):
                    k += 1
                if k < n and _starts_clause(lows, toks, k) and lows[k] not in _FORMS:
                    i = k
                    changed = True
                break
        # Reported speech: "you said (that) ...", "I think (that) ..."
        if n - i > 2 and lows[i] in ("i", "you") and lows[i + 1] in _REPORTING:
            k = i + 2
            if lows[i + 1] == "told" and k < n and lows[k] in ("me", "you", "us"):
                k += 1
            if k < n and lows[k] == "that":
                k += 1
            if _starts_clause(lows, toks, k) and lows[k] not in _FORMS:
                i = k
                changed = True
    # Facts sit at the start of a clause; a run-on clause is read up to MAX_CLAUSE_TOKENS.
    return toks[i:i + MAX_CLAUSE_TOKENS], lows[i:i + MAX_CLAUSE_TOKENS], ""


# ── Rules over one clause ────────────────────────────────────────────────────────────────

class _Clause:
    def __init__(self, toks, lows, speaker, caseless, col: _Collector):
        self.toks, self.lows, self.speaker = toks, lows, speaker
        self.caseless, self.col = caseless, col
        self.negated = any(
            lows[k] == "anymore" or (lows[k] in ("any", "no") and k + 1 < len(lows)
                                     and lows[k + 1] in ("more", "longer"))
            for k in range(len(lows)))

    # who "I/my" and "you/your" are in this line
    def me(self) -> str:
        return self.speaker

    def other(self) -> str:
        return "Assistant" if self.speaker == "User" else "User"

    def owner(self, word: str) -> str | None:
        if word in ("i", "me", "my"):
            return self.me()
        if word in ("you", "your"):
            return self.other()
        return None


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
    verb_text = "needs to" if relation == "HAS_TASK" else "wants to"
    hints = ("task",) if relation == "HAS_TASK" else ("goal",)
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


def _clause_facts(cl: _Clause, inherited):
    """Facts of one clause; returns the subject for a coordinated next clause."""
    if not cl.lows:
        return None
    if _try_due(cl):
        return None
    if _try_instruction(cl) or _try_call_me(cl):
        return None
    _appositives(cl)
    if _try_role(cl):
        return None
    lows = cl.lows
    if lows[:1] == ["remind"] and len(lows) > 3 and lows[1] == "me" and lows[2] == "to":
        _task(cl, cl.me() if cl.speaker == "User" else "User", 3, "HAS_TASK")
        return None
    k = 1 if lows[:1] == ["please"] else 0
    for phrase in (("remember", "to"), ("do", "not", "forget", "to")):
        if tuple(lows[k:k + len(phrase)]) == phrase and cl.speaker == "User":
            _task(cl, "User", k + len(phrase), "HAS_TASK")     # "remember to buy milk"
            return None
    subj = _subject(cl, inherited)
    if subj is None:
        return None
    subject, first, i = subj
    # "my sister Anna lives in Rome": a possessive-role-name subject
    if _try_have_named(cl, subject, i):
        return (subject, first)
    _apply_rules(cl, subject, first, i)
    return (subject, first)


# ── Public API ──────────────────────────────────────────────────────────────────────────

def extract(body: str, spec: ModeSpec) -> LocalExtraction:
    """Entities and facts of an episode body, typed with the mode's entity types."""
    return _extract_blocks(_bounded_blocks(body or ""), spec)


def _extract_blocks(blocks: list[tuple[str, str]], spec: ModeSpec) -> LocalExtraction:
    col = _Collector(spec)
    text_for_tags: list[str] = []
    for speaker, raw in blocks:
        text = _normalize(raw)
        text_for_tags.append(f"{speaker}: {text}")
        lowercase_words = frozenset(m.group(0) for m in re.finditer(r"\b[a-z][a-z']+\b", text))
        for line in text.splitlines():
            if not line.strip():
                continue
            cased = [c for c in line if c.isupper() or c.islower()]
            if len(cased) > 3 and not any(c.islower() for c in cased):
                line = line.lower()              # SHOUTED LINES carry no case information
            caseless = not any(c.isupper() for c in line)
            for sentence in _sentences(line):
                toks = _tokens(sentence)
                if not toks:
                    continue
                lows = [_lower(t) for t in toks]
                _mention_names(toks, lows, col, lowercase_words)
                question = sentence.rstrip().endswith("?")
                spans = _clauses(toks, lows)
                inherited = None
                for idx, (s, e, coordinated) in enumerate(spans):
                    ctoks, clows, kind = _strip_discourse(toks[s:e], lows[s:e])
                    if not ctoks or kind == "conditional":
                        inherited = None
                        continue
                    is_question = (question and idx == len(spans) - 1) or (
                        clows[0] in _QUESTION_START and question)
                    if is_question or (clows[0] in _QUESTION_START and len(clows) > 1
                                       and clows[1] in ("i", "you", "we", "he", "she", "they")):
                        inherited = None
                        continue
                    cl = _Clause(ctoks, clows, speaker, caseless, col)
                    inherited = _clause_facts(cl, inherited if coordinated else None)
    if spec.tagging and text_for_tags:
        tags = analyze("\n".join(text_for_tags), emotions="Emotion" in spec.entity_types,
                       sensitivity=spec.emotion_sensitivity,
                       topics="Topic" in spec.entity_types)
        for emotion in tags.emotions:
            col.entities.setdefault("emotion:" + emotion, LocalEntity(emotion, "Emotion"))
        for topic in tags.topics:
            col.entities.setdefault("topic:" + topic, LocalEntity(topic, "Topic"))
    return col.result()


_WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")


def word_count(body: str) -> int:
    """Words in the turn; role labels ("User:", "Assistant:") are not words."""
    return len(_WORD.findall(_LABEL.sub(" ", body or "")))


def is_low_value(body: str, threshold: int) -> bool:
    """True when the turn has fewer words than `threshold` (the Low-Value Threshold)."""
    return word_count(body) < threshold


_REMEMBER = re.compile(
    r"\b(remember (this|that|it)|please remember|don'?t forget|do not forget|note (that|this)|"
    r"make a note|keep in mind|for future reference|for the record|/remember_this|"
    r"save (this|that)|remember:)", re.I)
_DONT_STORE = re.compile(
    r"\b(don'?t|do not|never) (remember|store|save|record|memori[sz]e)\b|\boff the record\b|"
    r"\bforget (this|that|what i (just )?said)\b|/forget_that", re.I)
_SMALL_TALK = set("""
hi hello hey hiya yo thanks thank you thx ty ok okay k kk cool nice great good awesome sure
yes yeah yep yup no nope nah bye goodbye cya see later lol haha hehe wow oh ah hmm alright
right got it perfect fine np welcome morning evening night gn gm sounds cheers please
""".split())
_GATE_SPEC = mode_spec("Chatbot", emotion_tagging=False, topic_tagging=False)


def gate_decision(body: str) -> tuple[bool | None, str]:
    """MemoryGate without an LLM: (True, why) keep, (False, why) skip, (None, why) unsure."""
    blocks = _bounded_blocks(body or "")
    user = "\n".join(t for s, t in blocks if s == "User")
    if _DONT_STORE.search(user):
        return False, "asked not to remember"
    if _REMEMBER.search(user):
        return True, "asked to remember"
    if not any(_WORD.search(t) for _, t in blocks):
        return False, "empty turn"
    found = _extract_blocks(blocks, _GATE_SPEC)
    personal = [f for f in found.facts if "User" in (f.subject, f.object)]
    if personal:
        return True, f"personal fact: {personal[0].fact}"
    if found.facts:
        return True, f"fact: {found.facts[0].fact}"
    user_words = [w.lower() for w in _WORD.findall(user)]
    if not user_words or (len(user_words) <= 6 and all(w in _SMALL_TALK for w in user_words)):
        return False, "small talk"
    first_person = {"i", "my", "me", "mine", "we", "our", "us", "i'm", "i've", "i'd", "i'll"}
    if not any(w in first_person for w in user_words) and user.strip().endswith("?"):
        return None, "a question with nothing about the user"
    return None, "no clear signal"


def _name_key(name: str) -> list[str]:
    text = unicodedata.normalize("NFKD", name)
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = re.sub(r"'s\b", "", text.casefold())
    return [w for w in re.split(r"[^\w]+", text) if w]


_PERSON_TITLES = {"dr", "mr", "mrs", "ms", "miss", "mx", "prof", "professor", "sir", "dame",
                  "rev", "fr", "capt", "captain", "lord", "lady", "judge", "coach"}


_ORG_SUFFIXES = {"corp", "corporation", "inc", "ltd", "llc", "gmbh", "plc", "co", "company",
                 "group", "labs", "ag", "sa", "limited"}
_NOT_PERSON_PARTS = _ORG_SUFFIXES | {
    "st", "saint", "san", "santa", "los", "las", "el", "la", "le", "new", "fort", "port",
    "lake", "mount", "mt", "city", "county", "state", "university", "college", "school",
    "bank", "river", "island", "street", "road", "park", "north", "south", "east", "west",
    "project", "team", "club", "app"}


def _alias_of(short: list[str], full: list[str]) -> bool:
    """`short` names `full` by its first or last words: a person's first or last name
    ("Bob" of "Bob Smith"), or an organization without its suffix ("Acme" of "Acme Corp").
    Not a place's or a thing's part ("Louis" of "St Louis", "Beatles" of "The Beatles")."""
    n = len(short)
    if full[:n] == short:
        extra = full[n:]
    elif full[-n:] == short:
        extra = full[:-n]
    else:
        return False
    if full[:n] == short and all(w in _ORG_SUFFIXES for w in extra):
        return True
    return all(w.isalpha() and w not in _NOT_PERSON_PARTS and w not in _STOP_ANY
               for w in extra + short)


def canonical_entity(name: str, existing: Iterable[str]) -> str | None:
    """The existing entity `name` refers to, or None when no match is confident.

    Case, accents, punctuation and titles do not matter ("dr okafor" -> "Dr Okafor",
    "Zoe" -> "Zoë"). A first or last name alone matches the one existing full name that
    starts or ends with it ("Bob" -> "Bob Smith"), and a full name matches the one
    existing short name it extends; two candidates make it ambiguous (None).
    """
    words = _name_key(name or "")
    if not words or all(w in _STOP_ANY for w in words):
        return None
    bare = [w for w in words if w not in _PERSON_TITLES] or words
    titles = {w for w in words if w in _PERSON_TITLES}
    candidates = [e for e in existing if e and e.strip()]
    exact = [e for e in candidates if _name_key(e) == words]
    if exact:
        return exact[0]

    def compatible(e: str) -> bool:
        # "Mr Okafor" is not "Dr Okafor", and "Dr Smith" need not be "Bob Smith".
        other = {w for w in _name_key(e) if w in _PERSON_TITLES}
        return not titles or titles == other

    keyed = [(e, [w for w in _name_key(e) if w not in _PERSON_TITLES] or _name_key(e))
             for e in candidates if compatible(e)]
    same = [e for e, k in keyed if k == bare]
    if len(same) == 1:
        return same[0]
    if len(same) > 1:
        return None
    if any(len(w) < 2 for w in bare):
        return None
    longer = [e for e, k in keyed if len(k) > len(bare) and _alias_of(bare, k)]
    shorter = [e for e, k in keyed if 0 < len(k) < len(bare) and len(k[0]) > 1
               and _alias_of(k, bare)]
    if len(longer) == 1 and not shorter:
        return longer[0]
    if len(shorter) == 1 and not longer:
        # Only when no other full name also extends that short name.
        short_key = dict(keyed)[shorter[0]]
        rivals = [e for e, k in keyed if len(k) > len(short_key) and _alias_of(short_key, k)]
        if not rivals:
            return shorter[0]
    return None


# ── reading a search query (rules, like the extraction above) ─────────────────────────────
_PAST_INTENT = re.compile(
    r"\b(before|previous(ly)?|used to|formerly|former|originally|prior to|no longer|any ?more|"
    r"in the past|back then|old (address|job|car|flat|house|home)|last (year|month|week|time))\b", re.I)
_MY_ROLE = re.compile(r"\bmy ((?:[^\W\d_][\w\-]* ){0,2}[^\W\d_][\w\-]*)", re.I)


def asks_about_past(query: str) -> bool:
    """'Where did Ravi live before moving to Valencia?': superseded facts are the answer."""
    return bool(_PAST_INTENT.search(query))


def role_references(query: str) -> list[tuple[str, str]]:
    """("my boss", "HAS_BOSS")-style pairs for the roles a query names, longest first per
    mention: the relations under which the user's own facts name that person ("My boss is
    Tomasz" is stored as User HAS_BOSS Tomasz)."""
    out: list[tuple[str, str]] = []
    for m in _MY_ROLE.finditer(query):
        words = m.group(1).split()
        for n in range(len(words), 0, -1):
            role = [w.lower() for w in words[:n]]
            if role[-1].endswith("'s"):
                role[-1] = role[-1][:-2]
            phrase = f"{m.group(0)[:3]}{' '.join(words[:n])}"
            out.append((phrase, "HAS_" + _upper_snake(role)))
    return out
