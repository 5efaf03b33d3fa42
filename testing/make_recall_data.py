"""Generate testing/data/recall_conversation.json deterministically: a long chat about the
user's people, with questions whose known answer is the one turn that states the fact asked
for. Used by `memoryplus bench` for recall@10 (and, on a small build, by
tests/test_retrieval_quality.py).

    python -m memoryplus.testing.make_recall_data      # rewrites the file (same content every time)

What makes it harder than "a unique name in one turn":

* core people (the user's landlord, boss, dentist...) come up in many turns: several facts,
  small talk that only mentions them, and turns about their relatives. Their name alone
  does not pick the turn.
* facts change: people move, change jobs and employers (LIVES_IN, WORKS_AS, WORKS_AT, the
  relations the local extractor treats as one-at-a-time). "Where does X live now?" is
  answered by the later turn, "Where did X live before moving to Y?" by the earlier one.
* questions by relation: "What does my landlord do for a living?", answered by a turn that
  says "My landlord Tomasz works as..." (relation_linked) or only "Tomasz works as..." after
  an earlier "My landlord is Tomasz." (relation_hop). Each such role belongs to one person.
* paraphrased questions share little more than the name with the statement.
* distractor turns share the question's words and the person's name but are about someone
  else ("Priya's brother works as a welder").

File format (read by cli/bench.py): {"turns": [[id, user, assistant], ...],
"questions": [[question, answer_turn_id], ...]}, plus "meta" parallel to "questions":
[category, person, kind, value, earlier_value_or_null] for reports and tests.

Banks larger than the data set (`bench` grows to 5,000 turns) are padded by
generate_turns(n): the 500 turns above, then blocks built the same way (same mix of facts,
updates, mentions, distractors and small talk) about new people only, "First Last" names
that share no word with the data set, and frequent people with roles the data set does not
use, so every question keeps its one answer turn while the bank gains ~76 people per 500
turns. `python -m memoryplus.testing.make_recall_data` prints the mix of both parts.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).parent / "data" / "recall_conversation.json"
NAMES = """Priya Tomasz Ingrid Kwame Lucia Rafael Mei Oskar Fatima Henrik Amara Dmitri Sofia Jonas
Yuki Mateo Leila Pavel Nadia Emeka Clara Bjorn Aisha Marco Hana Tobias Zara Felix Ines Kenji
Olga Samir Greta Diego Noor Lars Elena Kofi Rosa Anton Mira Hugo Selin Viktor Lena Omar Petra
Luca Daria Milan Keiko Ruben Alma Stefan Ayla Nico Vera Imre Talia Bruno Freya Ravi Ottilie Joao
Maren Idris Carmen Wanjiru Aurelio Signe Tariq Bettina Ciaran Eliska Farid Gianna Hamish Ilse
Jasper Katya Lorenzo Magda""".split()
# One person each: "my <role>" names exactly one person (the extractor's functional roles).
CORE_ROLES = ["landlord", "boss", "dentist", "accountant", "therapist", "lawyer", "barber",
              "vet", "coach", "tutor", "physio", "optician"]
# Roles people have several of: never asked about by role.
RELS = ["cousin", "friend", "colleague", "neighbour", "classmate", "teammate", "flatmate",
        "uncle", "aunt", "niece", "nephew", "brother", "sister"]
KIN = ["brother", "sister", "flatmate", "partner", "colleague", "neighbour", "cousin", "son",
       "daughter", "best friend"]
CITIES = ["Leeds", "Porto", "Gdansk", "Tallinn", "Valencia", "Bergen", "Nairobi", "Osaka", "Quito",
          "Krakow", "Ghent", "Bologna", "Halifax", "Cork", "Lyon", "Tampere", "Brno", "Seville",
          "Dundee", "Utrecht", "Graz", "Aarhus", "Bilbao", "Turin", "Malmo"]
JOBS = ["veterinarian", "pastry chef", "air traffic controller", "pharmacist", "carpenter",
        "translator", "radiologist", "firefighter", "architect", "beekeeper", "tax auditor",
        "marine biologist", "piano tuner", "locksmith", "midwife", "geologist", "sommelier",
        "bus driver", "librarian", "welder", "florist", "actuary", "zookeeper", "electrician"]
COMPANIES = ["Kestrel Foods", "Northwind Logistics", "Bluefin Analytics", "Harbour Bank",
             "Copperleaf Games", "Redwood Clinic", "Silverline Rail", "Maple Insurance",
             "Orchid Pharma", "Granite Builders", "Lumen Energy", "Falcon Airways"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
ALLERGIES = ["peanuts", "shellfish", "cat hair", "penicillin", "pollen", "sesame", "latex",
             "bee stings", "gluten", "kiwi fruit", "dust mites", "mustard"]
SPORTS = ["badminton", "water polo", "rock climbing", "fencing", "curling", "table tennis",
          "rowing", "handball", "cricket", "judo", "lacrosse", "squash", "archery", "volleyball"]
LANGUAGES = ["Portuguese", "Japanese", "Swahili", "Finnish", "Polish", "Greek", "Turkish",
             "Korean", "Dutch", "Hungarian", "Tagalog", "Icelandic"]
CARS = ["Skoda Octavia", "Volvo estate", "Fiat Panda", "Toyota Prius", "Mini Cooper",
        "Tesla Model 3", "Renault Clio", "Subaru Outback", "Land Rover Defender", "Nissan Leaf"]
PETS = ["a parrot", "two rabbits", "a tortoise", "a greyhound", "three goldfish", "a ferret",
        "a Maine Coon cat", "a hedgehog", "a corgi", "a chameleon"]
TOPICS = ["volcanoes", "medieval castles", "jazz", "space probes", "sourdough", "chess openings",
          "deep sea fish", "old maps", "bridges", "bees"]


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


# kind -> (values, statement predicate, plain question, paraphrased question, by-role question,
#          distractor predicate about someone else)
KINDS = {
    "city": (CITIES, "lives in {v}", "Where does {n} live?", "In which town is {n} based?",
             "Where does {n} live?", "lives in {v}"),
    "job": (JOBS, "works as {a} {v}", "What does {n} work as?", "How does {n} earn a living?",
            "What does {n} do for a living?", "works as {a} {v}"),
    "employer": (COMPANIES, "works at {v}", "Which company does {n} work at?",
                 "Which firm employs {n}?", "Which company does {n} work at?", "works at {v}"),
    "sport": (SPORTS, "plays {v} every weekend", "What sport does {n} play every weekend?",
              "How does {n} keep fit on Saturdays and Sundays?", "Which sport does {n} play?",
              "plays {v} every weekend"),
    "allergy": (ALLERGIES, "is allergic to {v}", "What is {n} allergic to?",
                "What must {n} avoid for health reasons?", "What is {n} allergic to?",
                "is allergic to {v}"),
    "language": (LANGUAGES, "speaks {v} fluently", "Which language does {n} speak fluently?",
                 "In which foreign tongue could I chat with {n}?",
                 "Which language does {n} speak?", "speaks {v} fluently"),
    "car": (CARS, "owns {a} {v}", "What car does {n} own?",
            "What vehicle does {n} get around in?", "What car does {n} own?", "owns {a} {v}"),
    "pet": (PETS, "keeps {v} at home", "Which pet does {n} keep at home?",
            "Which animals share {n}'s house?", "Which pet does {n} have?", "keeps {v} at home"),
    "hometown": (CITIES, "is from {v}", "Where is {n} from?",
                 "What is {n}'s place of origin?", "Where is {n} from?", "is from {v}"),
    "birthday": (None, "has a birthday on {v}", "When is {n}'s birthday?",
                 "On what date should I congratulate {n} every year?",
                 "When is {n}'s birthday?", "has a birthday on {v}"),
}
# functional relations the local extractor supersedes: (kind, new-value statements,
# current-value questions, earlier-value question)
UPDATES = {
    "city": (["{s} just moved to {v}.", "{s} has moved to {v}.", "{s} relocated to {v} last month."],
             ["Where does {n} live now?", "Which city is {n} living in at the moment?"],
             "Where did {n} live before moving to {v}?"),
    "job": (["{s} started a new job and now works as {a} {v}.", "{s} now works as {a} {v}."],
            ["What does {n} do for work now?", "What is {n}'s current job?"],
            "What did {n} do before working as {a} {v}?"),
    "employer": (["{s} switched employers and now works at {v}.", "{s} now works at {v}."],
                 ["Which company does {n} work at now?", "Who employs {n} at present?"],
                 "Where did {n} work before joining {v}?"),
}
MENTIONS = ["I had coffee with {n} this morning.", "{n} came over for dinner and we watched a film.",
            "{n} lent me a great book about {t}.", "Ran into {n} at the supermarket today.",
            "{n} sent me a funny video about {t}.", "{n} recommended a podcast about {t}.",
            "{n} helped me carry a sofa up the stairs.", "I still owe {n} a postcard."]
MENTION_REPLIES = ["Sounds nice!", "Ha, lovely.", "That's kind of them.", "Fun!"]
ACKS = ["Got it, thanks for telling me.", "Noted!", "Good to know.", "Thanks, I'll keep that in mind."]
FILLER = [
    ("Can you suggest something quick for dinner tonight?", "How about a vegetable stir-fry with rice?"),
    ("What's a good way to stay focused while working from home?", "Try time-boxing with short breaks."),
    ("Tell me a fun fact about octopuses.", "They have three hearts and blue blood."),
    ("How do I remove a coffee stain from a shirt?", "Rinse with cold water, then use a little detergent."),
    ("Any tips for sleeping better?", "Keep a regular schedule and avoid screens late at night."),
    ("What's the difference between weather and climate?", "Weather is short-term, climate is long-term averages."),
    ("Recommend a board game for four players.", "Ticket to Ride works well for four."),
    ("How long should I boil an egg for a runny yolk?", "About six minutes from boiling water."),
    ("Explain compound interest simply.", "You earn interest on your interest as well as the principal."),
    ("Give me a short stretching routine.", "Neck rolls, shoulder circles, hamstring and calf stretches."),
    ("What's a polite way to decline a meeting?", "Thank them, say you can't attend, offer an alternative."),
    ("How do plants know which way is up?", "Gravity-sensing cells guide roots down and shoots up."),
]
CATEGORIES = ["same_person", "paraphrase", "distractor", "update", "previous",
              "relation_linked", "relation_hop"]


def _value(kind: str, rng: random.Random, taken: set[str]) -> str:
    values = KINDS[kind][0]
    while True:
        v = (f"{rng.randint(1, 28)} {rng.choice(MONTHS)}" if values is None else rng.choice(values))
        if v not in taken:
            taken.add(v)
            return v


def _pred(template: str, v: str) -> str:
    return template.format(v=v, a=_article(v))


class _Turn:
    def __init__(self, user: str, assistant: str, kind: str = "small_talk", who: str | None = None,
                 facts: int = 0):
        self.user, self.assistant, self.id = user, assistant, None
        self.kind, self.who, self.facts = kind, who, facts     # for stats(): what the turn is


def build(seed: int = 7, n_core: int = 12, n_peripheral: int = 64, n_filler: int = 29) -> dict:
    """The data set; the default build fits the quick benchmark's 500 turns."""
    return _build(seed, n_core, n_peripheral, n_filler)[0]


def _build(seed: int, n_core: int, n_peripheral: int, n_filler: int, names: list[str] = NAMES,
           core_roles: list[str] = CORE_ROLES, small_talk: list = FILLER) -> tuple[dict, list[_Turn]]:
    rng = random.Random(seed)
    assert n_core <= len(core_roles) and n_core + n_peripheral <= len(names)
    queues: list[list[_Turn]] = []           # per person, in the order said
    loose: list[_Turn] = []                  # distractors and small talk: anywhere
    questions: list[tuple[str, _Turn, list]] = []   # (question, answer turn, meta)

    def ask(q: str, turn: _Turn, category: str, name: str, kind: str, value: str,
            earlier: str | None = None) -> None:
        questions.append((q, turn, [category, name, kind, value, earlier]))

    def distractors(name: str, kind: str, taken: set[str], count: int) -> None:
        for kin in rng.sample(KIN, count):
            v = _value(kind, rng, set(taken))          # never the person's own value
            loose.append(_Turn(f"{name}'s {kin} {_pred(KINDS[kind][5], v)}.", rng.choice(ACKS),
                               "distractor", name))

    people = [(name, core_roles[i] if i < n_core else RELS[i % len(RELS)], i < n_core)
              for i, name in enumerate(names[:n_core + n_peripheral])]
    for name, role, core in people:
        taken: set[str] = set()
        kinds = rng.sample(list(KINDS), 7 if core else 4)
        # which functional facts change: most core people move, some change jobs/employers
        updated = [k for k in kinds if k in UPDATES and rng.random() < (0.6 if core else 0.35)]
        values = {k: _value(k, rng, taken) for k in kinds}
        new_values = {k: _value(k, rng, taken) for k in updated}
        queue: list[_Turn] = []
        facts: dict[str, _Turn] = {}
        linked: dict[str, bool] = {}
        if core:
            queue.append(_Turn(f"My {role} is {name}.", rng.choice(ACKS), "intro", name))
        first = True
        pending = list(kinds)
        rng.shuffle(pending)
        while pending:
            kind = pending.pop()
            if core:
                link = rng.random() < 0.35
                subject = f"My {role} {name}" if link else name
            else:
                link = False
                subject = f"My {role} {name}" if first else name
            first = False
            text = f"{subject} {_pred(KINDS[kind][1], values[kind])}"
            turn = _Turn("", rng.choice(ACKS), "fact", name, 1)
            facts[kind], linked[kind] = turn, link
            # peripheral people: sometimes two facts in one turn
            if not core and pending and rng.random() < 0.4:
                other = pending.pop()
                text += f" and {_pred(KINDS[other][1], values[other])}"
                facts[other], linked[other] = turn, link
                turn.facts = 2
            turn.user = text + "."
            queue.append(turn)
        if core:
            for _ in range(4):
                queue.append(_Turn(rng.choice(MENTIONS).format(n=name, t=rng.choice(TOPICS)),
                                   rng.choice(MENTION_REPLIES), "mention", name))
            queue[1:] = rng.sample(queue[1:], len(queue) - 1)
        # updates come after the statement they replace
        new_turns: dict[str, _Turn] = {}
        for kind in updated:
            link = core and rng.random() < 0.35
            subject = f"My {role} {name}" if link else name
            v = new_values[kind]
            turn = _Turn(rng.choice(UPDATES[kind][0]).format(s=subject, v=v, a=_article(v)),
                         rng.choice(ACKS), "update", name, 1)
            at = queue.index(facts[kind])
            queue.insert(rng.randint(at + 1, len(queue)), turn)
            new_turns[kind], linked[kind + ":new"] = turn, link
        queues.append(queue)

        # questions
        by_role = set(rng.sample(kinds, 4)) if core else set()
        for kind in kinds:
            if kind in updated:
                v, old = new_values[kind], values[kind]
                ask(rng.choice(UPDATES[kind][1]).format(n=name), new_turns[kind], "update",
                    name, kind, v, old)
                ask(UPDATES[kind][2].format(n=name, v=v, a=_article(v)), facts[kind], "previous",
                    name, kind, old)
                if kind in by_role:
                    q = KINDS[kind][4].format(n=f"my {role}").rstrip("?") + " now?"
                    cat = "relation_linked" if linked[kind + ":new"] else "relation_hop"
                    ask(q[0].upper() + q[1:], new_turns[kind], cat, name, kind, v, old)
                continue
            v = values[kind]
            if kind in by_role:
                cat = "relation_linked" if linked[kind] else "relation_hop"
                ask(KINDS[kind][4].format(n=f"my {role}"), facts[kind], cat, name, kind, v)
            style = rng.choice(["same_person", "paraphrase", "distractor"])
            if style == "paraphrase":
                ask(KINDS[kind][3].format(n=name), facts[kind], "paraphrase", name, kind, v)
            else:
                ask(KINDS[kind][2].format(n=name), facts[kind], style, name, kind, v)
                if style == "distractor":
                    distractors(name, kind, taken, 1)

    loose += [_Turn(*rng.choice(small_talk)) for _ in range(n_filler)]
    # interleave: people's turns keep their order; loose turns land anywhere
    stream: list[_Turn] = []
    remaining = [list(q) for q in queues]
    while any(remaining):
        weights = [len(q) for q in remaining]
        q = rng.choices(remaining, weights=weights)[0]
        stream.append(q.pop(0))
    for turn in loose:
        stream.insert(rng.randint(0, len(stream)), turn)
    for n, turn in enumerate(stream, 1):
        turn.id = f"t{n:04d}"
    order = {id(t): n for n, t in enumerate(stream)}
    questions.sort(key=lambda x: order[id(x[1])])
    return {"about": "Generated by testing/make_recall_data.py (seed %d): the user's people across "
                     "many turns, with updates, relations, paraphrases and distractors; each "
                     "question's answer is the id of the one turn that states it; meta is "
                     "[category, person, kind, value, earlier value]." % seed,
            "turns": [[t.id, t.user, t.assistant] for t in stream],
            "questions": [[q, t.id] for q, t, _ in questions],
            "meta": [m for _, _, m in questions]}, stream


# ── padding: the same kind of chat beyond the data set, for banks larger than 500 turns ──
# New people only, named "First Last" from pools that share no word with the data set (so no
# padded turn restates or changes a data-set person's fact, and every question keeps its one
# answer turn); the frequent people get roles of their own, never the data set's CORE_ROLES
# (a second "my landlord" would make "What does my landlord do?" ambiguous).
PAD_FIRST = """Adele Bastian Celine Dorian Edith Fabian Gemma Harald Iris Jakub Karin Leon Marta
Niklas Orla Pietro Quinn Rhea Simon Thea Ulrich Valeria Wim Xenia Yara Zoltan Agnes Boris
Cecilia Damian Esther Filip Gustav Helga Ivan Julia Klaus Lotte Mikael Nora Otto Paula Rasmus
Sanna Teodor Ursula Vincent Wilma Yusuf Zofia Adrian Bianca Conrad Dagny Emil Flora Gideon
Hilde Ivo Jana Kasimir Liv Moritz Nele Oliver Pia Roman Saskia Tilda Walter""".split()
PAD_LAST = """Abbott Brennan Castillo Dahl Eriksen Fischer Gallagher Horvath Iversen Jansen
Kowalczyk Lindqvist Moreau Novak Okafor Petrov Quinlan Rossi Schmidt Takahashi Varga Weber
Yilmaz Zielinski Andersen Bauer Costa Dupont Esposito Ferreira Gruber Haddad Jovanovic Keller
Lambert Mendes Nakamura Olsen Pereira Romano Sato Tanaka Ueda Vogel Yamamoto Zimmermann Arslan
Berger Conti Dimitrov Engel Fontaine Gomez Hartmann Ibrahim Jensen Kaplan Lopez Marino Nielsen
Popescu Richter Svensson Thorsen Lundgren Mazur Brandt Kovacs""".split()
PAD_ROLES = ["doctor", "manager", "supervisor", "hairdresser", "trainer", "nurse", "surgeon",
             "dermatologist", "psychiatrist", "paediatrician", "advisor", "agent"]
SMALL_TALK = FILLER + [
    ("What's a good houseplant for a dark room?", "A snake plant or a ZZ plant copes well with low light."),
    ("How do I keep basil alive on a windowsill?", "Water it when the soil is dry and pinch off the flowers."),
    ("Suggest a name for a book club.", "How about 'Chapter and Verse'?"),
    ("What's a healthy snack for the afternoon?", "A handful of nuts and an apple."),
    ("How can I make my coffee less bitter?", "Use slightly cooler water and a coarser grind."),
    ("Is it better to stretch before or after running?", "Dynamic warm-up before, static stretches after."),
    ("What should I pack for a weekend hike?", "Water, layers, snacks, a map and a small first-aid kit."),
    ("How do I descale a kettle?", "Boil a mix of water and vinegar, leave it, then rinse well."),
    ("Give me a riddle.", "What has keys but can't open locks? A piano."),
    ("How many minutes should I steep green tea?", "Two to three minutes at about 80 degrees."),
    ("What's an easy dessert with three ingredients?", "Banana, oats and peanut butter cookies."),
    ("How do I stop my glasses from fogging up?", "A drop of dish soap, rubbed in and wiped off, helps."),
    ("Any ideas for a rainy Sunday?", "Bake bread, start a puzzle or watch a film series."),
    ("What's the best way to learn touch typing?", "Fifteen minutes a day on a typing tutor, eyes off the keys."),
    ("Why is the sky blue?", "Air scatters blue light more than red light."),
    ("How do I fold a fitted sheet?", "Tuck the corners into each other, then fold into a rectangle."),
    ("Recommend a podcast genre for long drives.", "Narrative history or true-crime series work well."),
    ("How often should I water a cactus?", "Every two to four weeks, less in winter."),
    ("What's a good warm-up before lifting weights?", "Five minutes of light cardio and a few light sets."),
    ("How do I write a thank-you note?", "Be specific about what you're thankful for and keep it short."),
] + [(q.format(t=t), a.format(t=t)) for t in TOPICS for q, a in [
    ("Can you recommend a good book about {t}?", "A popular introduction to {t} from your library is a great start."),
    ("Tell me something surprising about {t}.", "There's more history behind {t} than most people think."),
    ("I want to learn more about {t}. Where do I start?", "Start with a short documentary on {t}, then a beginner's book."),
]]


def _pad_names(seed: int) -> list[str]:
    names = [f"{f} {l}" for f in PAD_FIRST for l in PAD_LAST]
    random.Random(seed * 7919 + 1).shuffle(names)
    return names


def _generate(n: int, seed: int = 7) -> list[_Turn]:
    """The data set's turns (ids t0001...), then padding blocks in the data set's own mix
    (ids x00501...) until n turns."""
    data, stream = _build(seed, 12, 64, 29)
    out = list(stream)
    names = _pad_names(seed)
    per_block = 12 + 64
    block = 0
    while len(out) < n:
        block += 1
        if per_block * block > len(names):
            raise ValueError(f"{n} turns need more padded names than {len(names)}")
        _, more = _build(seed * 10007 + block, 12, 64, 29, names[per_block * (block - 1):per_block * block],
                         PAD_ROLES, SMALL_TALK)
        for turn in more:
            turn.id = f"x{len(out) + 1:05d}"
            out.append(turn)
    return out[:n]


def generate_turns(n: int, seed: int = 7) -> list[list[str]]:
    """n turns [id, user, assistant]: the data set's (the first 500, exactly the file's), then
    new people with their facts, updates, mentions, distractors and small talk in the same
    proportions. Deterministic; 5,000 turns take well under a second."""
    return [[t.id, t.user, t.assistant] for t in _generate(n, seed)]


def stats(turns: list[_Turn]) -> dict:
    """What a stretch of turns holds: distinct people and, per 100 turns, facts, updates..."""
    n = len(turns) or 1
    count = lambda kind: sum(t.kind == kind for t in turns)   # noqa: E731
    return {"turns": len(turns), "people": len({t.who for t in turns if t.kind in ("fact", "intro")}),
            "facts_per_100": 100 * sum(t.facts for t in turns if t.kind == "fact") / n,
            "updates_per_100": 100 * count("update") / n,
            "mentions_per_100": 100 * count("mention") / n,
            "distractors_per_100": 100 * count("distractor") / n,
            "intros_per_100": 100 * count("intro") / n,
            "small_talk_share": count("small_talk") / n}


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    data = build()
    OUT.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")
    counts: dict[str, int] = {}
    for m in data["meta"]:
        counts[m[0]] = counts.get(m[0], 0) + 1
    print(f"{OUT}: {len(data['turns'])} turns, {len(data['questions'])} questions: "
          + ", ".join(f"{c} {counts.get(c, 0)}" for c in CATEGORIES))
    turns = _generate(5000)
    for label, part in (("data set (first 500)", turns[:500]), ("padding (500-5,000)", turns[500:]),
                        ("all 5,000", turns)):
        print(f"{label}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in stats(part).items()))


if __name__ == "__main__":
    main()
