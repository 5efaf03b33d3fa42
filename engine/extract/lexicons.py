"""The vocabulary of the local extraction: word classes, the verb table and the rules
it drives (which verbs and particles give which relation, functional or not)."""
from __future__ import annotations

from dataclasses import dataclass


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
friend brother sister sibling child kid son daughter cousin colleague coworker
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
    "quit": ("quits", "quitting", "quit", "quit"),
    "become": ("becomes", "becoming", "became", "become"),
    "buy": ("buys", "buying", "bought", "bought"),
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

# ── Word families (reading a search query: extract/query.py) ─────────────────────────────
# The words people use for the same person, thing or single-valued fact of their life: a
# query names one ("my boss", "Am I vegetarian?"), the memory may hold another ("my manager
# Tomasz", "I'm pescatarian now"). The words of a line stand for each other; after ">" come
# narrower words, which stand for the words before it but not for each other (a son is a
# child, not a daughter). General English, chosen by meaning, not from any data set.
WORD_FAMILIES = """
boss manager supervisor superior lead
wife husband spouse partner
girlfriend boyfriend partner
fiance fiancee fiancé fiancée partner
mom mum mother mommy mama
dad father daddy papa
parent > mom mum mother dad father
grandma grandmother granny nana
grandpa grandfather granddad grandad
kid child > son daughter
doctor physician gp > dentist pediatrician paediatrician dermatologist
therapist counselor counsellor psychologist psychiatrist
friend buddy pal bestie
colleague coworker
teacher tutor instructor
coach trainer
roommate flatmate housemate
neighbour neighbor
lawyer attorney solicitor
vet veterinarian
diet vegetarian vegan pescatarian pescetarian flexitarian keto paleo
job occupation profession career
flat apartment
car vehicle
bike bicycle
phone smartphone
movie film
holiday vacation
dog > puppy
cat > kitten
"""
