"""The word lists of the offline emotion, topic and vibe analysis (engine/insights.py):
which cues name which emotion or topic, how strongly, and the words that change a cue's
weight (negators, intensifiers, clause breaks). Data, no logic: a new cue goes here."""
from __future__ import annotations

import re

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
