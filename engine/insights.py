"""Offline emotion, topic and vibe analysis: lexicons matched on whole tokens.

No LLM, no network, deterministic. Text is split into tokens (words, and single
punctuation or emoji characters); cues are looked up as whole token sequences, so "display"
never matches a gaming cue and "category" never matches "cat" (the earlier plugin matched
substrings and tagged everything "curious").

Emotions are the speaker's: when the text has role labels ("User: ..."), only User lines are
read for emotions and vibe (the assistant's "happy to help" is not the user's mood); topics
come from every line. A cue preceded by a negation in the same clause ("not happy", "don't
worry") does not count.

Sensitivity: Low keeps only strong, explicit cues ("I'm furious", "I hate", "so excited"),
Medium adds clear ones ("frustrated", "haha that's hilarious", "thank you"), High adds mild
cues (emoji, "lol", "hmm", "ugh", "thanks"). A clear cue with an intensifier ("so", "really"),
in capitals or stretched ("sooo") counts as strong.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from memoryplus.common.text import LEXICON_TOKEN

MAX_CHARS = 200_000        # longer text is analysed up to here
MAX_EMOTIONS = 3
MAX_TOPICS = 3

# ── Emotions ───────────────────────────────────────────────────────────────────────────
# emotion -> (strong cues, clear cues, mild cues); each cue is a word or short phrase.
_EMOTION_CUES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "happy": (
        ("overjoyed", "ecstatic", "elated", "over the moon", "best day ever", "on cloud nine"),
        ("happy", "glad", "delighted", "pleased", "joyful", "cheerful", "made my day",
         "feel great", "feeling great"),
        ("yay", "🙂", "😊", "😀", "😃", "😁", "☺", ":)", ":-)", ":]", "=)", ":D", "<3", "❤")),
    "excited": (
        ("so excited", "can't wait", "cannot wait", "thrilled", "pumped", "psyched",
         "super excited"),
        ("excited", "exciting", "stoked", "looking forward", "eager"),
        ("woohoo", "woo", "🎉", "🤩", "🥳", "🙌")),
    "grateful": (
        ("so grateful", "thank you so much", "thanks so much", "can't thank you enough",
         "really appreciate", "truly appreciate", "deeply grateful", "lifesaver"),
        ("grateful", "thankful", "thank you", "appreciate it", "appreciate that",
         "appreciate your", "thanks a lot", "much appreciated", "many thanks"),
        ("thanks", "thx", "ty", "cheers", "🙏")),
    "amused": (
        ("laughing so hard", "dying of laughter", "funniest thing", "cracking up", "🤣"),
        ("hilarious", "lmao", "lmfao", "rofl", "so funny", "that's funny", "amused",
         "made me laugh", "😂", "😆"),
        ("lol", "haha", "hehe", "lel", "😄", "😹", "xd", ":p")),
    "curious": (
        ("so curious", "dying to know", "fascinated by", "really curious"),
        ("curious", "intrigued", "fascinated", "i wonder", "wondering whether",
         "wondering if", "wondering how", "wondering why", "wondering what",
         "fascinating"),
        ("hmm", "hm", "🤔", "interesting", "interested")),
    "frustrated": (
        ("so frustrated", "fed up", "sick of", "sick and tired", "drives me crazy",
         "driving me crazy", "drives me nuts", "driving me nuts", "at my wits' end",
         "wits end", "losing my mind", "pulling my hair out"),
        ("frustrated", "frustrating", "annoyed", "annoying", "irritated", "irritating",
         "exasperated", "exasperating", "aggravating", "infuriating", "still broken",
         "still not working", "still doesn't work"),
        ("ugh", "argh", "grr", "sigh", "smh", "😤", "😒", "🙄", "facepalm", "🤦")),
    "angry": (
        ("furious", "livid", "enraged", "outraged", "i hate", "hate", "hated", "hates",
         "pissed off", "so angry", "so mad", "really angry", "seething", "🤬"),
        ("angry", "mad at", "pissed", "irate", "fuming", "😠", "😡"),
        ()),
    "sad": (
        ("devastated", "heartbroken", "miserable", "depressed", "so sad", "crushed",
         "broke my heart", "grieving", "😭"),
        ("sad", "unhappy", "upset", "down in the dumps", "feeling down", "feel down",
         "bummed", "crying", "cried", "gloomy", "sorrow", "😢", "😞", "😔", "☹", "🙁"),
        (":(", ":-(", ":'(", "=(")),
    "anxious": (
        ("panicking", "panic attack", "freaking out", "so anxious", "so worried",
         "so nervous", "so stressed", "terrified of failing", "dreading"),
        ("anxious", "worried", "worry", "worrying", "nervous", "stressed", "stressed out",
         "uneasy", "on edge", "overwhelmed", "panicky", "tense"),
        ("😬", "😰", "😟", "eek", "yikes", "gulp")),
    "afraid": (
        ("terrified", "petrified", "horrified", "scared to death", "😱"),
        ("scared", "afraid", "frightened", "fearful", "creeped out"),
        ("😨", "spooky")),
    "confused": (
        ("completely lost", "totally confused", "so confused", "makes no sense",
         "no idea what's going on"),
        ("confused", "confusing", "puzzled", "baffled", "don't understand",
         "do not understand", "doesn't make sense", "does not make sense", "lost me"),
        ("huh", "wait what", "😕", "🤨", "???")),
    "surprised": (
        ("can't believe", "cannot believe", "blown away", "mind blown", "mind-blown",
         "shocked", "stunned", "🤯"),
        ("surprised", "surprising", "amazed", "astonished", "no way", "wow", "unexpected"),
        ("whoa", "woah", "omg", "😮", "😲", "oh wow")),
    "disappointed": (
        ("so disappointed", "really disappointed", "deeply disappointed", "let me down"),
        ("disappointed", "disappointing", "let down", "bummer", "not happy", "too bad",
         "a shame"),
        ("meh", "oh well")),
    "tired": (
        ("exhausted", "burnt out", "burned out", "completely drained", "dead tired"),
        ("tired", "worn out", "drained", "sleepy", "knackered", "fatigued", "weary"),
        ("yawn", "😴", "🥱")),
    "proud": (
        ("so proud", "really proud", "incredibly proud"),
        ("proud", "nailed it", "accomplished"),
        ("💪", "😎")),
    "relieved": (
        ("so relieved", "huge relief", "what a relief"),
        ("relieved", "relief", "phew"),
        ("whew", "😌")),
    "lonely": (
        ("so lonely", "all alone", "completely alone"),
        ("lonely", "isolated", "left out"),
        ()),
    "bored": (
        ("so bored", "bored to death", "bored out of my mind"),
        ("bored", "boring", "dull", "tedious"),
        ("😑", "zzz")),
    "hopeful": (
        ("really hope", "so hopeful"),
        ("hopeful", "fingers crossed", "optimistic", "i hope"),
        ("🤞",)),
    "embarrassed": (
        ("so embarrassed", "mortified", "humiliated"),
        ("embarrassed", "embarrassing", "ashamed", "awkward"),
        ("😅", "😳", "oops")),
}

EMOTION_NAMES: tuple[str, ...] = tuple(_EMOTION_CUES)
# Phrases whose emotion word names no feeling ("an upset stomach", "sad news" is still one).
_NOT_EMOTIONS = ("upset stomach", "upset tummy", "upset belly", "stomach upset",
                 "tummy upset", "tired of waiting")

# Valence of each emotion on 0 (negative) .. 1 (positive); used for vibe.
_VALENCE: dict[str, float] = {
    "happy": 0.85, "excited": 0.9, "grateful": 0.85, "amused": 0.8, "curious": 0.6,
    "frustrated": 0.2, "angry": 0.1, "sad": 0.15, "anxious": 0.25, "afraid": 0.2,
    "confused": 0.4, "surprised": 0.55, "disappointed": 0.25, "tired": 0.35, "proud": 0.85,
    "relieved": 0.75, "lonely": 0.2, "bored": 0.35, "hopeful": 0.7, "embarrassed": 0.3,
}

# Other emotion names (e.g. from an LLM) and what they mean here.
_SYNONYMS: dict[str, str] = {
    "joyful": "happy", "joy": "happy", "glad": "happy", "cheerful": "happy",
    "delighted": "happy", "pleased": "happy", "content": "happy", "satisfied": "happy",
    "happiness": "happy", "love": "happy", "loving": "happy", "affectionate": "happy",
    "calm": "relieved", "peaceful": "relieved", "relaxed": "relieved",
    "enthusiastic": "excited", "eager": "excited", "thrilled": "excited",
    "thankful": "grateful", "appreciative": "grateful", "gratitude": "grateful",
    "amusement": "amused", "playful": "amused", "humorous": "amused",
    "interested": "curious", "intrigued": "curious", "inquisitive": "curious",
    "fascinated": "curious", "curiosity": "curious",
    "annoyed": "frustrated", "irritated": "frustrated", "exasperated": "frustrated",
    "impatient": "frustrated", "frustration": "frustrated",
    "mad": "angry", "furious": "angry", "irate": "angry", "anger": "angry",
    "resentful": "angry", "hostile": "angry",
    "unhappy": "sad", "upset": "sad", "depressed": "sad", "sadness": "sad",
    "heartbroken": "sad", "grief": "sad", "grieving": "sad", "melancholy": "sad",
    "worried": "anxious", "nervous": "anxious", "stressed": "anxious", "anxiety": "anxious",
    "overwhelmed": "anxious", "tense": "anxious",
    "scared": "afraid", "fearful": "afraid", "fear": "afraid", "frightened": "afraid",
    "terrified": "afraid",
    "puzzled": "confused", "perplexed": "confused", "uncertain": "confused",
    "confusion": "confused",
    "amazed": "surprised", "astonished": "surprised", "shocked": "surprised",
    "surprise": "surprised",
    "disappointment": "disappointed", "let down": "disappointed",
    "exhausted": "tired", "weary": "tired", "sleepy": "tired", "fatigued": "tired",
    "pride": "proud", "accomplished": "proud", "confident": "proud",
    "relief": "relieved",
    "isolated": "lonely", "loneliness": "lonely",
    "boredom": "bored", "indifferent": "bored",
    "optimistic": "hopeful", "hope": "hopeful",
    "ashamed": "embarrassed", "awkward": "embarrassed", "embarrassment": "embarrassed",
    "neutral": "",
}

# ── Topics ─────────────────────────────────────────────────────────────────────────────
# topic -> cues; a cue ending in "~" is weak (half weight): it needs company to count.
_TOPIC_CUES: dict[str, tuple[str, ...]] = {
    "linux": ("linux", "ubuntu", "debian", "fedora", "arch linux", "manjaro", "mint~",
              "centos", "rhel", "kernel~", "systemd", "apt-get", "apt~", "sudo", "grub",
              "gnome~", "kde", "distro", "wayland", "xorg", "bash~", "zsh~", "shell~",
              "terminal~", "chmod", "cron~", "dnf", "pacman~", "flatpak", "snap package"),
    "programming": ("programming", "programmer", "coding", "code~", "python", "javascript",
                    "typescript", "java", "c++", "c#", "golang", "rust~", "kotlin", "swift~",
                    "ruby~", "php", "compiler", "debugging", "debug", "debugger", "bug~",
                    "function~", "variable~", "refactor", "refactoring", "git", "github",
                    "gitlab", "repository", "repo", "pull request", "merge request",
                    "commit~", "stack trace", "traceback", "exception~", "api", "sdk",
                    "framework~", "algorithm", "regex", "sql", "unit test", "pytest",
                    "docker", "kubernetes", "frontend", "backend", "npm", "pip install",
                    "source code", "software developer", "developer~", "syntax", "ide"),
    "ai": ("artificial intelligence", "machine learning", "deep learning", "neural network",
           "llm", "gpt", "chatgpt", "language model", "openai", "anthropic", "ai",
           "prompt~", "embedding~", "transformer~", "fine-tuning", "fine-tune", "chatbot"),
    "hardware": ("gpu", "cpu", "motherboard", "graphics card", "ssd", "hard drive",
                 "ram~", "monitor~", "display~", "laptop", "keyboard~", "mouse~", "usb",
                 "hdmi", "processor", "overclock", "bios", "firmware~"),
    "cooking": ("cooking", "cook", "recipe", "bake", "baking", "oven", "roast", "roasting",
                "simmer", "saute", "ingredient", "kitchen~", "chef", "cuisine", "spices",
                "dough", "curry~", "grill", "grilling", "frying pan", "marinade",
                "sourdough", "stir-fry", "casserole", "dinner~", "lunch~", "pasta~",
                "soup~"),
    "food": ("restaurant", "food~", "cafe", "pizza", "sushi", "burger", "vegan~",
             "vegetarian~", "snack", "dessert", "takeout", "takeaway", "brunch",
             "coffee~", "tea~", "wine~", "beer~", "delicious", "tasty"),
    "travel": ("travel", "travelling", "traveling", "trip", "flight", "airport", "hotel",
               "vacation", "holiday~", "passport", "itinerary", "tourist", "backpacking",
               "luggage", "jet lag", "cruise", "sightseeing", "hostel", "airbnb",
               "boarding pass", "layover", "road trip", "visa~", "booking~"),
    "health": ("doctor", "dentist", "hospital", "sick", "illness", "symptom", "medication",
               "medicine", "headache", "migraine", "fever", "flu", "covid", "diagnosis",
               "diagnosed", "therapy", "therapist", "blood pressure", "diabetes", "allergy",
               "allergic", "surgery", "prescription", "injury", "injured", "pain~",
               "clinic", "nurse", "vaccine", "vaccination", "insomnia", "sleep~", "diet~",
               "mental health", "anxiety~", "depression~", "checkup", "physio",
               "physiotherapy", "cholesterol", "asthma"),
    "fitness": ("workout", "gym", "exercise", "exercising", "running~", "jogging", "yoga",
                "weightlifting", "lifting~", "cardio", "marathon", "push-up", "squat",
                "treadmill", "pilates", "personal trainer", "crossfit", "5k", "10k",
                "half marathon", "stretching"),
    "finance": ("money", "budget", "budgeting", "invest", "investing", "investment",
                "stock~", "stock market", "bank~", "mortgage", "loan", "tax", "taxes",
                "salary", "savings", "retirement", "pension", "crypto", "bitcoin",
                "ethereum", "401k", "ira~", "expense", "debt", "credit card",
                "interest rate", "portfolio~", "dividend", "inflation", "rent~",
                "bills~", "paycheck", "net worth", "index fund", "etf"),
    "music": ("music", "song", "album", "guitar", "piano", "drums", "drummer", "band~",
              "concert", "playlist", "spotify", "singer", "singing", "lyrics", "melody",
              "chord", "violin", "cello", "jazz", "hip hop", "rap~", "rock music",
              "bass~", "vinyl", "musician", "gig~", "orchestra", "symphony", "ukulele",
              "saxophone", "soundtrack~", "composer", "headphones~"),
    "gaming": ("video game", "gaming", "gamer", "console~", "playstation", "ps4", "ps5",
               "xbox", "nintendo", "nintendo switch", "steam deck", "steam~", "rpg", "mmo",
               "mmorpg", "minecraft", "fortnite", "zelda", "elden ring", "game~",
               "multiplayer", "speedrun", "esports", "twitch", "controller~", "dlc",
               "boss fight", "playthrough", "gameplay", "pokemon", "pokémon"),
    "work": ("job", "boss", "coworker", "co-worker", "colleague", "office~", "meeting~",
             "manager~", "promotion", "career", "interview~", "hired", "fired", "resume~",
             "cv~", "workplace", "at work", "my job", "work~", "shift~", "overtime",
             "deadline~", "team lead", "performance review", "layoff", "laid off",
             "job offer", "quit my job", "employer", "raise~", "commute"),
    "project management": ("project management", "sprint", "scrum", "kanban", "backlog",
                           "roadmap", "milestone", "stakeholder", "jira", "gantt", "standup",
                           "stand-up", "retrospective", "deliverable", "project plan",
                           "okr", "kpi~", "trello", "asana"),
    "family": ("mom", "mum", "dad", "mother", "father", "parents", "sister", "brother",
               "sibling", "son", "daughter", "kids", "children", "wife", "husband",
               "grandma", "grandpa", "grandmother", "grandfather", "family", "aunt",
               "uncle", "cousin", "niece", "nephew", "baby~", "in-laws", "toddler",
               "stepmom", "stepdad", "grandchildren", "parenting"),
    "relationships": ("girlfriend", "boyfriend", "partner~", "dating", "breakup",
                      "broke up", "relationship", "marriage", "wedding", "divorce",
                      "crush", "romantic", "anniversary", "engaged~", "fiance", "fiancé",
                      "fiancée", "tinder"),
    "sports": ("football", "soccer", "basketball", "baseball", "tennis", "cricket",
               "hockey", "golf", "rugby", "olympics", "nba", "nfl", "nhl", "mlb", "fifa",
               "match~", "team~", "league", "tournament", "championship", "stadium",
               "world cup", "formula 1", "f1", "premier league", "super bowl", "goalkeeper",
               "referee", "volleyball", "cycling~", "swimming~", "skiing", "boxing",
               "ufc", "wimbledon", "playoffs"),
    "movies": ("movie", "film", "cinema", "netflix", "actor", "actress", "director~",
               "trailer", "tv show", "tv series", "series~", "episode~", "sequel",
               "documentary", "oscars", "hbo", "screenplay", "box office", "anime~",
               "sitcom", "streaming~", "disney+", "hulu"),
    "books": ("book", "novel", "author", "reading~", "chapter~", "kindle", "library~",
              "fiction", "nonfiction", "non-fiction", "poetry", "poem", "paperback",
              "bestseller", "audiobook", "ebook", "book club", "memoir", "hardcover"),
    "education": ("school", "university", "college", "class~", "course~", "exam",
                  "homework", "student", "teacher", "professor", "lecture", "degree",
                  "thesis", "semester", "studying~", "grades", "tuition", "graduate",
                  "graduation", "phd", "master's", "bachelor's", "coursework",
                  "assignment~", "curriculum", "classroom"),
    "pets": ("dog", "cat", "puppy", "kitten", "pet", "vet", "veterinarian", "leash",
             "litter box", "aquarium", "hamster", "parrot", "guinea pig", "dog food",
             "cat food", "adopted a", "rescue dog"),
    "weather": ("weather", "rain", "raining", "rainy", "snow", "snowing", "sunny",
                "forecast", "temperature~", "storm", "thunderstorm", "humid", "humidity",
                "heatwave", "heat wave", "hurricane", "tornado", "drizzle", "freezing~"),
    "shopping": ("shopping", "buy~", "bought~", "order~", "amazon~", "store~", "discount",
                 "sale~", "cart~", "checkout~", "purchase", "purchased", "coupon",
                 "black friday", "refund", "return policy", "mall", "groceries",
                 "grocery"),
    "politics": ("election", "vote", "voting", "government~", "president~", "parliament",
                 "congress", "senator", "senate", "policy~", "political", "politics",
                 "democrat", "democrats", "republican", "republicans", "campaign~",
                 "legislation", "prime minister", "ballot", "geopolitics"),
    "science": ("physics", "chemistry", "biology", "experiment", "hypothesis",
                "research~", "scientist", "molecule", "quantum", "astronomy",
                "evolution~", "dna", "laboratory", "lab~", "neuroscience", "genetics",
                "telescope", "particle", "peer review", "scientific"),
    "art": ("painting", "drawing", "sketch", "sketching", "canvas", "museum", "gallery",
            "artist", "sculpture", "watercolor", "watercolour", "illustration", "acrylic",
            "art~", "artwork", "photography", "photographer", "camera~", "design~"),
    "home": ("garden", "gardening", "houseplant", "renovation", "renovating", "diy",
             "furniture", "apartment~", "landlord", "plumbing", "plumber", "cleaning~",
             "house~", "decorating", "ikea", "roof", "backyard", "lawn", "moving house",
             "home improvement", "flat~"),
    "cars": ("car", "driving", "engine~", "mechanic", "tire", "tyre", "gasoline", "petrol",
             "oil change", "electric vehicle", "ev~", "tesla~", "driver's license",
             "driving test", "sedan", "suv", "motorcycle", "parking~", "road trip~"),
}

TOPIC_NAMES: tuple[str, ...] = tuple(_TOPIC_CUES)
# Topic cues that are also verbs: "book a check-up", "to book", "booked the table" are no
# reading. Used as a verb when an infinitive marker, a modal or a subject comes before, or
# an object (article, possessive, pronoun) comes after.
_VERB_CUES = frozenset({"book"})
_BEFORE_VERB = frozenset({"to", "i", "we", "you", "please", "can", "could", "will", "would",
                          "should", "must", "shall", "might", "may", "lets", "let's", "and",
                          "or", "then", "also", "just", "'ll", "gotta"})
_AFTER_VERB = frozenset({"a", "an", "the", "my", "your", "our", "his", "her", "their", "me",
                         "us", "him", "them", "it", "this", "that", "some", "another", "in",
                         "into", "online", "tickets", "flights", "seats"})

# ── Vibe words beyond emotions ──────────────────────────────────────────────────────────
_POSITIVE = ("good", "great", "awesome", "amazing", "excellent", "perfect", "wonderful",
             "fantastic", "love", "loved", "loving", "lovely", "nice", "brilliant",
             "beautiful", "best", "fun", "enjoy", "enjoyed", "solved", "fixed", "works now",
             "success", "successful", "cool", "superb", "works perfectly", "well done")
_NEGATIVE = ("bad", "terrible", "awful", "horrible", "worst", "broken", "fail", "failed",
             "failing", "failure", "crash", "crashed", "crashes", "wrong", "useless",
             "sucks", "ugly", "painful", "disaster", "nightmare", "hopeless", "ruined",
             "doesn't work", "not working", "stupid", "garbage", "mess")

_NEGATORS = frozenset({
    "not", "no", "never", "hardly", "barely", "without", "nor", "neither", "nobody",
    "nothing", "dont", "didnt", "doesnt", "isnt", "arent", "wasnt", "werent", "cant",
    "cannot", "wont", "aint", "couldnt", "wouldnt", "shouldnt", "havent", "hasnt", "hadnt",
    "lack", "zero"})
_INTENSIFIERS = frozenset({
    "so", "really", "very", "extremely", "incredibly", "super", "absolutely", "totally",
    "utterly", "completely", "truly", "deeply", "seriously", "insanely", "terribly",
    "awfully", "genuinely", "hella", "quite"})
_CLAUSE_BREAK = frozenset({".", ",", ";", ":", "!", "?", "…", "but", "though", "although",
                           "however", "yet", "-", "—", "–", "(", ")"})

_EMOTICON = re.compile(r"(?<!\S)(?::-?[)(\]\[DPp/|]|:'\(|;-?\)|=[)(]|<3|[xX]D)(?!\S)")
_ROLE = re.compile(r"^\s*(user|assistant|human|ai|bot|system)\s*:\s?", re.IGNORECASE)
_LEVELS = {"strong": 0, "clear": 1, "mild": 2}
_SENSITIVITY = {"low": 0, "medium": 1, "high": 2}


@dataclass
class Insights:
    emotions: list[str]
    topics: list[str]
    vibe: float | None


def _norm(tok: str) -> str:
    return tok.lower().replace("’", "'")


def _tokenize(text: str) -> list[str]:
    return LEXICON_TOKEN.findall(text)


def _build(entries: dict[str, list[tuple[str, object]]]) -> tuple[dict, dict]:
    """A phrase lexicon: token tuple -> payload, and first token -> longest phrase length."""
    lex: dict[tuple[str, ...], object] = {}
    first: dict[str, int] = {}
    for phrase, payload in ((p, v) for items in entries.values() for p, v in items):
        key = tuple(_norm(t) for t in _tokenize(phrase))
        if not key:
            continue
        lex.setdefault(key, payload)
        first[key[0]] = max(first.get(key[0], 0), len(key))
    return lex, first


def _plural(word: str) -> str | None:
    if not word.isalpha() or len(word) < 3 or word.endswith("s"):
        return None
    if word.endswith(("x", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _emotion_entries():
    out: dict[str, list] = {}
    for emotion, levels in _EMOTION_CUES.items():
        for level_name, cues in zip(("strong", "clear", "mild"), levels):
            for cue in cues:
                if cue.startswith((":", ";", "=", "<")) or cue in ("xd", ":p"):
                    continue   # emoticons are found by _EMOTICON
                out.setdefault(emotion, []).append((cue, (emotion, _LEVELS[level_name])))
    # matched first (longest match), then dropped: the words in them are not cues there
    out["-"] = [(phrase, ("", 0)) for phrase in _NOT_EMOTIONS]
    return out


def _topic_entries():
    out: dict[str, list] = {}
    for topic, cues in _TOPIC_CUES.items():
        for cue in cues:
            weight = 0.5 if cue.endswith("~") else 1.0
            phrase = cue.rstrip("~")
            out.setdefault(topic, []).append((phrase, (topic, weight, phrase)))
            words = phrase.split(" ")
            plural = _plural(words[-1])
            if plural:
                out[topic].append((" ".join(words[:-1] + [plural]), (topic, weight, phrase)))
    return out


_EMO_LEX, _EMO_FIRST = _build(_emotion_entries())
_TOPIC_LEX, _TOPIC_FIRST = _build(_topic_entries())
_SENT_LEX, _SENT_FIRST = _build({
    "pos": [(w, 1.0) for w in _POSITIVE], "neg": [(w, -1.0) for w in _NEGATIVE]})
_EMOTICONS = {
    ":)": ("happy", 2), ":-)": ("happy", 2), ":]": ("happy", 2), "=)": ("happy", 2),
    ":D": ("happy", 2), ":-D": ("happy", 2), "<3": ("happy", 2), ";)": ("amused", 2),
    ";-)": ("amused", 2), "xD": ("amused", 2), "XD": ("amused", 2), ":P": ("amused", 2),
    ":p": ("amused", 2), ":-P": ("amused", 2), ":(": ("sad", 2), ":-(": ("sad", 2),
    ":'(": ("sad", 1), "=(": ("sad", 2), ":/": ("confused", 2), ":-/": ("confused", 2),
    ":|": ("bored", 2), ":-|": ("bored", 2),
}


@lru_cache(maxsize=4096)
def _canon_token(tok: str) -> tuple[str, bool]:
    """Lowercase token with stretched letters undone ("sooo" -> "so", "hahaha" -> "haha").

    Returns (token, stretched)."""
    low = _norm(tok)
    if re.fullmatch(r"(?:ha){2,}h?|(?:ah){2,}", low):
        return "haha", len(low) > 4
    if re.fullmatch(r"(?:he){2,}h?", low):
        return "hehe", len(low) > 4
    if re.fullmatch(r"lo+l+", low):
        return "lol", len(low) > 3
    if re.search(r"(.)\1\1", low):
        for pattern in (r"(.)\1{2,}", ):
            two = re.sub(pattern, r"\1\1", low)
            one = re.sub(pattern, r"\1", low)
            for cand in (one, two):
                if (cand,) in _EMO_LEX or cand in _EMO_FIRST or cand in _INTENSIFIERS \
                        or (cand,) in _SENT_LEX:
                    return cand, True
            return one, True
    return low, False


def _scan(tokens: list[str], lex: dict, first: dict):
    """Longest-match phrase hits: yields (start, length, payload)."""
    i, n = 0, len(tokens)
    while i < n:
        longest = first.get(tokens[i])
        if longest:
            for size in range(min(longest, n - i), 0, -1):
                payload = lex.get(tuple(tokens[i:i + size]))
                if payload is not None:
                    yield i, size, payload
                    i += size
                    break
            else:
                i += 1
        else:
            i += 1


def _negated(tokens: list[str], start: int) -> bool:
    for j in range(start - 1, max(-1, start - 4), -1):
        tok = tokens[j]
        if tok in _CLAUSE_BREAK:
            return False
        if tok in _NEGATORS or tok.endswith("n't"):
            return True
    return False


def _speaker_text(text: str) -> tuple[str, str]:
    """(text to read emotions from, all text without role labels)."""
    if not any(_ROLE.match(line) for line in text.splitlines()[:200]) and not _ROLE.match(text):
        return text, text
    user_lines, all_lines = [], []
    speaker = "user"
    for line in text.splitlines():
        m = _ROLE.match(line)
        if m:
            role = m.group(1).lower()
            speaker = "user" if role in ("user", "human") else "other"
            line = line[m.end():]
        all_lines.append(line)
        if speaker == "user":
            user_lines.append(line)
    return "\n".join(user_lines), "\n".join(all_lines)


def _emotion_hits(text: str) -> tuple[list[tuple[str, int, int]], list[str]]:
    """(emotion, level, position) hits (level 0 strong, 1 clear, 2 mild), and the tokens."""
    raw = _tokenize(text)
    canon = [_canon_token(t) for t in raw]
    tokens = [c[0] for c in canon]
    hits = []
    for start, size, (emotion, level) in _scan(tokens, _EMO_LEX, _EMO_FIRST):
        if not emotion or _negated(tokens, start):
            continue
        words = raw[start:start + size]
        shouted = any(len(w) >= 3 and w.isalpha() and w.isupper() for w in words)
        stretched = any(c[1] for c in canon[start:start + size])
        intensified = start > 0 and tokens[start - 1] in _INTENSIFIERS
        if level == 1 and (shouted or stretched or intensified):
            level = 0
        elif level == 2 and (intensified or shouted):
            level = 1
        hits.append((emotion, level, start))
    for m in _EMOTICON.finditer(text):
        found = _EMOTICONS.get(m.group(0))
        if found:
            hits.append((found[0], found[1], len(raw) + m.start()))
    return hits, tokens


def _level_of(sensitivity: str) -> int:
    try:
        return _SENSITIVITY[sensitivity.strip().lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown emotion sensitivity {sensitivity!r}; expected Low, Medium "
                         "or High") from None


def detect_emotions(text: str, sensitivity: str = "Medium") -> list[str]:
    """Emotion names found in `text` (all of it, role labels or not), strongest first."""
    return _pick_emotions(_emotion_hits(text[:MAX_CHARS])[0], _level_of(sensitivity))


def _pick_emotions(hits: list[tuple[str, int, int]], limit: int) -> list[str]:
    best: dict[str, tuple[int, int]] = {}
    for emotion, level, pos in hits:
        if level <= limit and (emotion not in best or (level, pos) < best[emotion]):
            best[emotion] = (level, pos)
    return [e for e, _ in sorted(best.items(), key=lambda kv: kv[1])][:MAX_EMOTIONS]


def detect_topics(text: str) -> list[str]:
    """Topic labels found in `text`, best first."""
    tokens = [_norm(t) for t in _tokenize(text[:MAX_CHARS])]
    seen: dict[str, dict[str, float]] = {}
    first_pos: dict[str, int] = {}
    for start, size, (topic, weight, cue) in _scan(tokens, _TOPIC_LEX, _TOPIC_FIRST):
        if cue in _VERB_CUES and tokens[start] == cue and (
                (start > 0 and tokens[start - 1] in _BEFORE_VERB)
                or (start + size < len(tokens) and tokens[start + size] in _AFTER_VERB)):
            continue
        seen.setdefault(topic, {})[cue] = weight
        first_pos.setdefault(topic, start)
    scored = [(sum(cues.values()), topic) for topic, cues in seen.items()]
    scored = [(s, t) for s, t in scored if s >= 1.0]
    scored.sort(key=lambda st: (-st[0], first_pos[st[1]]))
    return [t for _, t in scored[:MAX_TOPICS]]


def _vibe(hits: list[tuple[str, int, int]], tokens: list[str]) -> float:
    total = 0.0
    for emotion, level, _pos in hits:
        total += 2 * (_VALENCE[emotion] - 0.5) * (1.5 if level == 0 else 1.0 if level == 1 else 0.5)
    for start, _size, polarity in _scan(tokens, _SENT_LEX, _SENT_FIRST):
        total += (-0.3 if _negated(tokens, start) else 0.6) * polarity
    return round(0.5 + 0.5 * math.tanh(total / 2), 2)


def analyze(text: str, *, emotions: bool = True, sensitivity: str = "Medium",
            topics: bool = True, vibe: bool = False) -> Insights:
    """Emotions (lowercase adjectives), topics (short lowercase labels) and vibe of `text`.

    `text` may be an episode body ("User: ..." / "Assistant: ..." lines): emotions and vibe
    are then read from User lines only, topics from all lines. vibe is 0 (negative) .. 1
    (positive), 0.5 neutral, and None when `vibe` is off.
    """
    limit = _level_of(sensitivity)  # validated even when emotions are off
    text = (text or "")[:MAX_CHARS]
    own, everything = _speaker_text(text)
    hits, tokens = _emotion_hits(own) if (emotions or vibe) else ([], [])
    return Insights(
        emotions=_pick_emotions(hits, limit) if emotions else [],
        topics=detect_topics(everything) if topics else [],
        vibe=_vibe(hits, tokens) if vibe else None,
    )


def canonical_emotion(name: str) -> str | None:
    """An emotion name (ours, a synonym, any case) as one of EMOTION_NAMES, or None."""
    key = " ".join((name or "").strip().lower().split())
    if key in _VALENCE:
        return key
    mapped = _SYNONYMS.get(key)
    return mapped or None


def vibe_from_emotions(emotions: list[str]) -> float | None:
    """Mean valence (0..1) of the known emotions in `emotions`; None when none is known.

    Accepts our names and common synonyms in any case, so it also scores emotion names an
    LLM extracted ("Joyful", "annoyed").
    """
    values = [_VALENCE[c] for c in (canonical_emotion(e) for e in emotions or []) if c]
    if not values:
        return None
    return round(sum(values) / len(values), 2)
