"""Local extraction: entities and facts with rules, no LLM (mistakes 8 and 10 avoided)."""
from __future__ import annotations

import time

import pytest

from memoryplus.config.schema import MEMORY_MODES
from memoryplus.engine.extract import (
    LocalEntity,
    LocalExtraction,
    LocalFact,
    as_the_user,
    canonical_entity,
    extract,
    family_words,
    gate_decision,
    is_low_value,
    role_references,
    word_count,
)
from memoryplus.engine.modes import mode_spec

IDENTITY = mode_spec("Identity", emotion_tagging=False, topic_tagging=False)
CHATBOT = mode_spec("Chatbot", emotion_tagging=False, topic_tagging=False)
PRODUCTIVITY = mode_spec("Productivity", emotion_tagging=False, topic_tagging=False)

JUNK = {"the", "i", "i'm", "me", "my", "you", "it", "this", "that", "thanks", "thank",
        "hello", "hi", "hey", "yes", "no", "ok", "okay", "yesterday", "today", "tomorrow",
        "sure", "great", "so", "well", "also", "please", "sorry", "maybe", "what", "how",
        "why", "when", "where", "can", "could", "would", "do", "does", "is", "a", "an",
        "and", "but", "or", "if", "then", "just", "really", "actually", "honestly",
        "call", "check", "let", "good", "nice", "cool", "sounds", "looks", "monday",
        "friday", "new", "happy", "birthday", "morning"}


def triples(result: LocalExtraction) -> set[tuple[str, str, str]]:
    return {(f.subject, f.relation, f.object) for f in result.facts}


def run(text: str, spec=IDENTITY) -> LocalExtraction:
    body = text if text.lstrip().lower().startswith(("user:", "assistant:")) else f"User: {text}"
    return extract(body, spec)


def assert_clean(result: LocalExtraction, spec=IDENTITY):
    in_facts = {f.subject for f in result.facts} | {f.object for f in result.facts}
    dates = {f.object for f in result.facts if f.relation in ("DUE_ON", "BORN_ON")}
    for e in result.entities:
        assert e.name in dates or e.name.lower() not in JUNK, e
        if e.name in ("User", "Assistant"):       # speakers are entities of their facts
            assert e.name in in_facts, e
        assert e.name.strip() == e.name and len(e.name) >= 2, e
        assert e.type == "Entity" or e.type in spec.entity_types, e
    for f in result.facts:
        assert f.subject and f.object and f.subject != f.object, f
        assert f.relation.replace("_", "").isalnum() and f.relation.isupper(), f
        assert f.fact.startswith(f.subject) and f.object in f.fact, f
        names = {e.name for e in result.entities}
        assert f.subject in names and f.object in names, f


# ── recall: first person, the brief's examples and many more ─────────────────────────────

CASES = [
    # (text, expected triples)
    ("I live in Berlin.", {("User", "LIVES_IN", "Berlin")}),
    ("my name is Ada", {("User", "IS_CALLED", "Ada")}),
    ("I work at Acme.", {("User", "WORKS_AT", "Acme")}),
    ("My dentist is Dr Okafor.", {("User", "HAS_DENTIST", "Dr Okafor")}),
    ("I love cooking.", {("User", "LIKES", "cooking")}),
    ("I like jazz and I hate mornings.",
     {("User", "LIKES", "jazz"), ("User", "DISLIKES", "mornings")}),
    ("I use Neovim and VS Code.", {("User", "USES", "Neovim"), ("User", "USES", "VS Code")}),
    ("I'm working on the Apollo project.", {("User", "WORKS_ON", "Apollo project")}),
    ("The Q3 report is due on Friday.", {("Q3 report", "DUE_ON", "Friday")}),
    ("I moved to Paris last year.", {("User", "LIVES_IN", "Paris")}),
    # contractions, case, punctuation
    ("i live in berlin and work at acme",
     {("User", "LIVES_IN", "Berlin"), ("User", "WORKS_AT", "Acme")}),
    ("I’m from Lagos, Nigeria!", {("User", "IS_FROM", "Lagos")}),
    ("I've been living in Zürich for three years.", {("User", "LIVES_IN", "Zürich")}),
    ("Honestly, I don't really enjoy running, but I love swimming.",
     {("User", "DISLIKES", "running"), ("User", "LIKES", "swimming")}),
    ("I'm 34 years old.", {("User", "HAS_AGE", "34")}),
    ("I turned 30 last week.", {("User", "HAS_AGE", "30")}),
    ("My name's Jamie.", {("User", "IS_CALLED", "Jamie")}),
    ("Call me Ada from now on.", {("User", "IS_CALLED", "Ada")}),
    ("I go by Jamie.", {("User", "IS_CALLED", "Jamie")}),
    ("I'm Ada, nice to meet you.", {("User", "IS_CALLED", "Ada")}),
    # roles
    ("Dr Okafor is my dentist.", {("User", "HAS_DENTIST", "Dr Okafor")}),
    ("my dentist is dr okafor", {("User", "HAS_DENTIST", "Dr Okafor")}),
    ("My GP is Dr. Ngozi Adeyemi.", {("User", "HAS_GP", "Dr Ngozi Adeyemi")}),
    ("My accountant is Mr Brown.", {("User", "HAS_ACCOUNTANT", "Mr Brown")}),
    ("My landlord is called Mr Patel.", {("User", "HAS_LANDLORD", "Mr Patel")}),
    ("My favourite colour is blue.", {("User", "HAS_FAVOURITE_COLOUR", "blue")}),
    ("my favorite band is Radiohead", {("User", "HAS_FAVOURITE_BAND", "Radiohead")}),
    ("My boss is Kim and my best friend is Sam.",
     {("User", "HAS_BOSS", "Kim"), ("User", "HAS_BEST_FRIEND", "Sam")}),
    ("My partner's name is Alex.", {("User", "HAS_PARTNER", "Alex")}),
    ("My mom's birthday is May 5.", {("User's mom", "HAS_BIRTHDAY", "May 5")}),
    ("My sister Anna lives in Rome.",
     {("User", "HAS_SISTER", "Anna"), ("Anna", "LIVES_IN", "Rome")}),
    ("My husband Tom is a chef at Nobu.",
     {("User", "HAS_HUSBAND", "Tom"), ("Tom", "IS_A", "chef"), ("Tom", "WORKS_AT", "Nobu")}),
    ("My brother works at Google.", {("User's brother", "WORKS_AT", "Google")}),
    ("My kids are Tom and Lily.", {("User", "HAS_KID", "Tom"), ("User", "HAS_KID", "Lily")}),
    ("I have a dog named Rex.", {("User", "HAS_DOG", "Rex")}),
    ("I have two cats called Mochi and Tofu.",
     {("User", "HAS_CAT", "Mochi"), ("User", "HAS_CAT", "Tofu")}),
    # third person
    ("Priya works for Globex.", {("Priya", "WORKS_AT", "Globex")}),
    ("Bob Smith works at Initech.", {("Bob Smith", "WORKS_AT", "Initech")}),
    ("Anna loves hiking.", {("Anna", "LIKES", "hiking")}),
    ("Kenji is from Osaka.", {("Kenji", "IS_FROM", "Osaka")}),
    # other verbs and forms, not spelled out in the rules' comments
    ("I reside in Oslo.", {("User", "LIVES_IN", "Oslo")}),
    ("I relocated to Vancouver in March.", {("User", "LIVES_IN", "Vancouver")}),
    ("I've worked at Siemens for five years.", {("User", "WORKS_AT", "Siemens")}),
    ("I'm employed by the City of Boston.", {("User", "WORKS_AT", "City of Boston")}),
    ("I work as a nurse at St Mary's Hospital.",
     {("User", "WORKS_AS", "nurse"), ("User", "WORKS_AT", "St Mary's Hospital")}),
    ("I'm a software engineer at Google.",
     {("User", "IS_A", "software engineer"), ("User", "WORKS_AT", "Google")}),
    ("I study computer science at the University of Edinburgh.",
     {("User", "STUDIES", "computer science"),
      ("User", "STUDIES_AT", "University of Edinburgh")}),
    ("I was born in 1990 in Łódź.", {("User", "BORN_ON", "1990"), ("User", "BORN_IN", "Łódź")}),
    ("I'm married to John Smith.", {("User", "MARRIED_TO", "John Smith")}),
    ("I speak French and German.", {("User", "SPEAKS", "French"), ("User", "SPEAKS", "German")}),
    ("I'm learning Japanese these days.", {("User", "LEARNING", "Japanese")}),
    ("I play the piano and chess.", {("User", "PLAYS", "piano"), ("User", "PLAYS", "chess")}),
    ("I own a Tesla Model 3.", {("User", "OWNS", "Tesla Model 3")}),
    ("I've been using Arch Linux for years.", {("User", "USES", "Arch Linux")}),
    ("I love hiking, cooking and jazz.",
     {("User", "LIKES", "hiking"), ("User", "LIKES", "cooking"), ("User", "LIKES", "jazz")}),
    ("I like to cook.", {("User", "LIKES", "cooking")}),
    ("I adore Italian food.", {("User", "LIKES", "Italian food")}),
    ("I am into rock climbing and board games.",
     {("User", "LIKES", "rock climbing"), ("User", "LIKES", "board games")}),
    ("I'm a big fan of Studio Ghibli.", {("User", "LIKES", "Studio Ghibli")}),
    ("I'm fond of old cars.", {("User", "LIKES", "old cars")}),
    ("I can't stand loud music.", {("User", "DISLIKES", "loud music")}),
    ("I don't like mushrooms.", {("User", "DISLIKES", "mushrooms")}),
    ("I dislike cilantro, I detest olives.",
     {("User", "DISLIKES", "cilantro"), ("User", "DISLIKES", "olives")}),
    ("I prefer tea over coffee.", {("User", "PREFERS", "tea")}),
    ("I'm interested in astronomy.", {("User", "INTERESTED_IN", "astronomy")}),
    ("I’m allergic to cats and I’m a vegan.",
     # a diet is single-valued (issue 18): HAS_DIET, so "I'm pescatarian now" replaces it
     {("User", "ALLERGIC_TO", "cats"), ("User", "HAS_DIET", "vegan")}),
    ("I'm 29 and I live in Oslo.", {("User", "HAS_AGE", "29"), ("User", "LIVES_IN", "Oslo")}),
    ("I went to Japan in 2019.", {("User", "VISITED", "Japan")}),
    ("I've been to Japan twice.", {("User", "VISITED", "Japan")}),
    ("I visited Great Britain and the United States.",
     {("User", "VISITED", "Great Britain"), ("User", "VISITED", "United States")}),
    ("I live in New York City now.", {("User", "LIVES_IN", "New York City")}),
    ("Hey! So I just moved to Lisbon from Toronto.", {("User", "LIVES_IN", "Lisbon")}),
    # tasks, goals, deadlines, instructions
    ("I'd like to learn Spanish.", {("User", "HAS_GOAL", "learn Spanish")}),
    ("I hope to run a marathon next year.", {("User", "HAS_GOAL", "run a marathon")}),
    ("Remind me to call the bank tomorrow.",
     {("User", "HAS_TASK", "call the bank"), ("call the bank", "DUE_ON", "tomorrow")}),
    ("I need to submit my thesis by June 15.",
     {("User", "HAS_TASK", "submit thesis"), ("submit thesis", "DUE_ON", "June 15")}),
    ("The deadline for the Q3 report is next Monday.",
     {("Q3 report", "DUE_ON", "next Monday")}),
    ("Our sprint review is due Friday.", {("sprint review", "DUE_ON", "Friday")}),
    ("The invoice for Acme is due by end of the month.",
     {("invoice for Acme", "DUE_ON", "end of month")}),
    ("Please always answer in French.",
     {("User", "GAVE_INSTRUCTION", "always answer in French")}),
    # contractions as people type them: no apostrophe, in capitals; a title with its dot
    ("i cant stand loud music", {("User", "DISLIKES", "loud music")}),
    ("I DONT LIKE MUSHROOMS.", {("User", "DISLIKES", "MUSHROOMS")}),
    ("Im learning Japanese these days.", {("User", "LEARNING", "Japanese")}),
    ("My dentist is Dr. Okafor.", {("User", "HAS_DENTIST", "Dr Okafor")}),
]


@pytest.mark.parametrize("text,expected", CASES, ids=[c[0][:40] for c in CASES])
def test_recall(text, expected):
    result = run(text)
    assert expected <= triples(result), triples(result)
    assert_clean(result)


def test_fact_sentences_are_readable():
    facts = {f.relation: f.fact for f in run(
        "I live in Berlin. My dentist is Dr Okafor. I'm 34. I love cooking. "
        "I work as a nurse.").facts}
    assert facts["LIVES_IN"] == "User lives in Berlin"
    assert facts["HAS_DENTIST"] == "User's dentist is Dr Okafor"
    assert facts["HAS_AGE"] == "User is 34 years old"
    assert facts["LIKES"] == "User loves cooking"
    assert facts["WORKS_AS"] == "User works as a nurse"
    due = run("The Apollo project is due on Friday.", PRODUCTIVITY).facts[0]
    assert due.fact == "Apollo project is due on Friday"


# ── functional relations come from grammar ─────────────────────────────────────────────

@pytest.mark.parametrize("text,relation,functional", [
    ("I live in Berlin.", "LIVES_IN", True),
    ("I reside in Oslo.", "LIVES_IN", True),
    ("I work at Acme.", "WORKS_AT", True),
    ("My name is Ada.", "IS_CALLED", True),
    ("I'm 34.", "HAS_AGE", True),
    ("I'm from Lyon.", "IS_FROM", True),
    ("I'm married to Sam.", "MARRIED_TO", True),
    ("The report is due Friday.", "DUE_ON", True),
    ("My dentist is Dr Okafor.", "HAS_DENTIST", True),
    ("My boss is Kim.", "HAS_BOSS", True),
    ("My plumber is Joe.", "HAS_PLUMBER", True),           # any singular role
    ("My favourite food is ramen.", "HAS_FAVOURITE_FOOD", True),
    ("My best friend is Sam.", "HAS_BEST_FRIEND", True),   # "best" makes it unique
    ("My friend is Sam.", "HAS_FRIEND", False),            # people have several friends
    ("My sister is Anna.", "HAS_SISTER", False),
    ("My colleague is Raj.", "HAS_COLLEAGUE", False),
    ("I have a dog named Rex.", "HAS_DOG", False),
    ("I love cooking.", "LIKES", False),
    ("I use Vim.", "USES", False),
    ("I speak French.", "SPEAKS", False),
    ("I'm working on Apollo.", "WORKS_ON", False),
    ("I visited Rome.", "VISITED", False),
])
def test_functional(text, relation, functional):
    facts = [f for f in run(text).facts if f.relation == relation]
    assert facts, triples(run(text))
    assert all(f.functional is functional for f in facts)


def test_a_later_statement_supersedes_within_a_turn():
    result = run("I live in Berlin. Actually, I live in Potsdam now.")
    assert [f.object for f in result.facts if f.relation == "LIVES_IN"] == ["Potsdam"]
    result = run("I lived in Berlin, but now I live in Paris.")
    assert [f.object for f in result.facts if f.relation == "LIVES_IN"] == ["Paris"]


# ── what must not be asserted ───────────────────────────────────────────────────────────

@pytest.mark.parametrize("text", [
    "I don't live in Berlin anymore.",
    "I do not live in Berlin any more.",
    "I no longer work at Acme.",
    "I never worked at Acme.",
    "I haven't lived in Berlin for years.",
    "I used to live in London.",
    "I lived in Berlin for ten years.",
    "I'm not from Paris.",
    "I'm moving to Paris next month.",
    "Maybe I'll move to Madrid.",
    "I might work at Google one day.",
    "If I lived in Paris I would be happy.",
    "I wish I lived in Hawaii.",
    "Do you know where I live?",
    "Do I work at Acme?",
    "Where do you live?",
    "He lives in Paris.",
    "It is due tomorrow.",
    "My old boss was Kim.",
    "I live in a small town near Munich.",
    "I live in the countryside.",
    "I'm a bit tired today.",
    "I love you.",
    "I like that idea.",
    "I like how you explained it.",
    "I really really love this!",
    "I really don't like it when people are late.",
    "My car is broken.",
    "Thanks! That's great.",
    "Sounds good. Let me check the logs first.",
    "OK thanks, that makes sense.",
    "The weather is nice today.",
    "We went to Italy last summer.",
    "I need to know.",
    "I want to see it.",
])
def test_no_fact(text):
    result = run(text)
    assert result.facts == [], triples(result)
    assert_clean(result)


def test_negation_keeps_other_clauses():
    result = run("I'm not from Paris, I'm from Lyon.")
    assert triples(result) == {("User", "IS_FROM", "Lyon")}
    result = run("I no longer live in Berlin; I live in Munich.")
    assert triples(result) == {("User", "LIVES_IN", "Munich")}
    result = run("Not anymore, I work at Globex now.")
    assert triples(result) == {("User", "WORKS_AT", "Globex")}


# ── speakers ────────────────────────────────────────────────────────────────────────────

def test_assistant_lines_you_is_the_user_and_i_is_the_assistant():
    body = ("User: what do you know about me?\n"
            "Assistant: You live in Berlin, and your dentist is Dr Okafor. "
            "I love helping people.")
    found = triples(extract(body, IDENTITY))
    assert ("User", "LIVES_IN", "Berlin") in found
    assert ("User", "HAS_DENTIST", "Dr Okafor") in found
    assert ("Assistant", "LIKES", "helping people") in found
    body = "Assistant: Noted — you're allergic to peanuts and your favourite food is ramen."
    assert triples(extract(body, IDENTITY)) == {("User", "ALLERGIC_TO", "peanuts"),
                                                ("User", "HAS_FAVOURITE_FOOD", "ramen")}


def test_assistant_hedges_assert_nothing():
    body = ("User: should I move?\nAssistant: I'd be happy to help you move to Berlin. "
            "I don't live anywhere, I'm an AI. Do you live in Paris?")
    assert extract(body, IDENTITY).facts == []


def test_user_you_is_the_assistant():
    found = triples(run("Your name is Apex."))
    assert found == {("Assistant", "IS_CALLED", "Apex")}


def test_multi_line_and_unlabelled_bodies():
    body = "User: I live in Oslo.\nI also work at Equinor.\nAssistant: Nice!"
    assert triples(extract(body, IDENTITY)) == {("User", "LIVES_IN", "Oslo"),
                                                ("User", "WORKS_AT", "Equinor")}
    assert triples(extract("I live in Oslo.", IDENTITY)) == {("User", "LIVES_IN", "Oslo")}
    assert extract("", IDENTITY) == LocalExtraction([], [])
    assert extract("System: you are a helpful assistant\n", IDENTITY).facts == []


# ── entities and their types ────────────────────────────────────────────────────────────

def entity_types(result):
    return {e.name: e.type for e in result.entities}


def test_types_follow_the_mode():
    text = "I'm working on the Apollo project with Priya. The Apollo project is due on Friday."
    prod = entity_types(run(text, PRODUCTIVITY))
    assert prod["Apollo project"] == "Project"
    assert prod["Friday"] == "Deadline"
    ident = entity_types(run(text, IDENTITY))
    assert ident["Apollo project"] == "Entity"           # Identity has no Project type
    assert ident["Friday"] == "Entity"
    ident = entity_types(run("I live in Berlin and work at Acme Corp.", IDENTITY))
    assert ident == {"User": "Person", "Berlin": "Place", "Acme Corp": "Organization"}
    chat = entity_types(run("I have a dog named Rex and I love hiking.", CHATBOT))
    assert chat["Rex"] == "Thing" and chat["hiking"] == "Interest"
    tools = entity_types(run("I use Jira and Figma for the launch.", PRODUCTIVITY))
    assert tools["Jira"] == tools["Figma"] == "Tool"


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_every_mode_types_with_its_own_types(mode):
    spec = mode_spec(mode, emotion_tagging=False, topic_tagging=False)
    text = ("Hi! I'm Ada. I live in Berlin, work at Acme Corp and I'm working on the Apollo "
            "project, which is due on Friday. My dentist is Dr Okafor. I love cooking.")
    result = run(text, spec)
    assert_clean(result, spec)
    assert ("User", "LIVES_IN", "Berlin") in triples(result)


def test_names_in_running_text():
    result = run("Yesterday I met Sarah at the Louvre with Dr. Jane Goodall and the team "
                 "from New York.")
    names = {e.name for e in result.entities}
    assert {"Sarah", "Louvre", "Dr Jane Goodall", "New York"} <= names
    assert_clean(result)
    result = run("I love New York. New York is huge. Thanks Bob, see you on Monday.")
    names = {e.name for e in result.entities}
    assert "New York" in names and "Bob" in names
    assert not names & {"York", "Monday", "Thanks"}


@pytest.mark.parametrize("text", [
    "Thanks! That's great.",
    "Hello there. How are you today?",
    "Happy Birthday!",
    "Good Morning! Merry Christmas everyone!",
    "Sounds good. Let me check the logs first.",
    "Yes. No. Maybe. OK. Sure. Cool.",
    "Call Bob tomorrow.",
    "First, check the logs. Then restart it.",
    "Please explain this. Also, make it shorter.",
    "What? Why? How? When? Where?",
    "Can you help me? I need a hand.",
])
def test_precision_of_names(text):
    result = run(text)
    assert_clean(result)
    names = {e.name.lower() for e in result.entities}
    assert names <= {"bob"}, names


def test_a_long_assistant_answer_adds_no_names_of_its_own():
    body = (
        "User: My laptop keeps overheating when I play games. I'm on Ubuntu 22.04 with an "
        "Nvidia card.\n"
        "Assistant: That sounds frustrating! Here are a few things you can try:\n"
        "1. Check your fan speeds with `sensors` (install lm-sensors first).\n"
        "2. Make sure the Nvidia proprietary driver is installed: open Software & Updates, go "
        "to Additional Drivers, and pick the recommended one.\n"
        "3. Clean the vents. Dust is the most common cause of overheating.\n"
        "4. Consider a cooling pad. Many users report a 5-10°C drop.\n"
        "If the problem persists, it may be worth contacting Lenovo support, since your "
        "warranty might still be valid.\nLet me know how it goes!")
    result = extract(body, CHATBOT)
    assert result.facts == []
    # the user's own names; the reply's ("Lenovo", "Additional Drivers") are its explanations
    assert {e.name for e in result.entities} == {"Ubuntu 22.04", "Nvidia"}
    # a mode that studies what is said keeps the assistant's names too
    assert {e.name for e in extract(body, mode_spec("Research", topic_tagging=False)).entities} == {
        "Ubuntu 22.04", "Nvidia", "Software & Updates", "Additional Drivers", "Lenovo"}


def test_invariants_on_random_input():
    import random
    rng = random.Random(7)
    vocab = ("I i my you your is am not don't never live lives in at to from work love hate "
             "use Berlin Dr Okafor dentist name called 's , . ! ? ; : — - ( ) \" and but if the "
             "a Apollo project due on Friday 34 have dog named Rex remind me to would like "
             "can't Zoë 😂 :) always from now on User: Assistant: \n").split(" ")
    specs = [mode_spec(m) for m in MEMORY_MODES]
    for _ in range(400):
        body = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 30)))
        spec = rng.choice(specs)
        result = extract(body, spec)
        names = {e.name for e in result.entities}
        for f in result.facts:
            assert f.subject in names and f.object in names, (body, f)
        for e in result.entities:
            assert e.name.strip() and (e.type == "Entity" or e.type in spec.entity_types)
        gate_decision(body)


def test_roles_alone_are_not_names():
    result = run("My GP said I should ask Mom.")
    assert not {e.name for e in result.entities} & {"GP", "Mom"}
    result = run("Mum lives in Cork.")
    assert triples(result) == {("User's mum", "LIVES_IN", "Cork")}


def test_unicode_names():
    result = run("Zoë Müller lives in São Paulo and works at Société Générale.")
    assert ("Zoë Müller", "LIVES_IN", "São Paulo") in triples(result)
    assert ("Zoë Müller", "WORKS_AT", "Société Générale") in triples(result)
    result = run("我住在北京。 Я живу в Москве.")        # no crash, nothing invented
    assert result.facts == []


def test_tagging_adds_emotion_and_topic_entities():
    tagged = mode_spec("Chatbot", emotion_sensitivity="Medium")
    result = run("I'm so frustrated, my Ubuntu kernel keeps crashing after the update.", tagged)
    types = entity_types(result)
    assert types.get("frustrated") == "Emotion"
    assert types.get("linux") == "Topic"
    assert "frustrated" not in entity_types(run("I'm so frustrated with Ubuntu.", CHATBOT))
    low = mode_spec("Chatbot", emotion_sensitivity="Low", topic_tagging=False)
    assert "frustrated" not in entity_types(run("I'm frustrated.", low))


def test_result_types():
    result = run("I live in Berlin.")
    assert all(isinstance(e, LocalEntity) for e in result.entities)
    assert all(isinstance(f, LocalFact) for f in result.facts)
    assert result.facts[0] == LocalFact("User", "LIVES_IN", "Berlin", "User lives in Berlin",
                                        True)


def test_deterministic():
    text = ("I live in Berlin, work at Acme and love jazz. My sister Anna lives in Rome. "
            "The Q3 report is due on Friday.")
    first = run(text)
    for _ in range(3):
        assert run(text) == first


# ── size ────────────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("body", [
    "User: " + "I live in Berlin and I love cooking. My dentist is Dr Okafor. " * 16_000,
    "User: " + "a" * 1_000_000,
    "User: " + "Abc " * 250_000,
    "User: hi" + "\n" * 1_000_000,
    "User: hi\nAssistant: ok\n" * 40_000,
    "User: I love " + "x, " * 330_000,
    "User: " + "!?." * 330_000,
    "User: I love " + "cats and " * 110_000,
], ids=["sentences", "one-word", "capitals", "newlines", "labels", "commas", "punct", "ands"])
def test_one_megabyte_is_bounded(body):
    start = time.perf_counter()
    result = extract(body, IDENTITY)
    elapsed = time.perf_counter() - start
    # ~0.05-0.4 s on a quiet machine; a pass that grew with the square of the text (a
    # backtracking pattern, a rescan per sentence) would take minutes. The slack is for CI
    # sharing its cores: the bound is about the shape of the work, not its speed.
    assert elapsed < 5.0, f"{elapsed:.2f} s"
    assert len(result.facts) <= 200 and len(result.entities) <= 300


def test_a_long_paste_does_not_crowd_out_the_other_speaker():
    body = ("User: " + "Lorem ipsum dolor sit amet. " * 40_000 + "\n"
            "Assistant: Noted, you live in Berlin.")
    assert ("User", "LIVES_IN", "Berlin") in triples(extract(body, IDENTITY))


# ── word count, low value ───────────────────────────────────────────────────────────────

@pytest.mark.option("low_value_threshold")
def test_word_count_ignores_role_labels():
    assert word_count("User: hi\nAssistant: Hello!") == 2
    assert word_count("User: ok") == 1
    assert word_count("user:   \nASSISTANT: 👍") == 0
    assert word_count("User: I'm fine, don't worry — it's e-mail.") == 6
    assert word_count("User: the User: label only counts at a line start") == 9
    assert word_count("") == 0


@pytest.mark.option("auto_prune")
def test_is_low_value():
    assert is_low_value("User: hi\nAssistant: Hello!", 3)
    assert not is_low_value("User: hi there\nAssistant: Hello!", 3)
    assert is_low_value("User: thanks\nAssistant: You're welcome.", 5)
    assert not is_low_value("User: I live in Berlin", 3)
    assert is_low_value("", 1)
    assert not is_low_value("User: ok", 1)


# ── the memory gate, locally ────────────────────────────────────────────────────────────

@pytest.mark.parametrize("body,decision", [
    ("User: hi\nAssistant: Hello! How can I help?", False),
    ("User: thanks!\nAssistant: You're welcome.", False),
    ("User: ok cool", False),
    ("", False),
    ("User: off the record, I hate my job", False),
    ("User: please don't remember this: I'm job hunting", False),
    ("User: I live in Berlin", True),
    ("User: my dentist is Dr Okafor", True),
    ("User: remember that the wifi password is in the blue notebook", True),
    ("User: The Q3 report is due on Friday", True),
    ("User: what is the capital of France?\nAssistant: Paris.", None),
    ("User: can you make this paragraph shorter\nAssistant: Sure: ...", None),
])
def test_gate_decision(body, decision):
    keep, reason = gate_decision(body)
    assert keep is decision, reason
    assert isinstance(reason, str) and reason


# ── alias resolution ────────────────────────────────────────────────────────────────────

EXISTING = ["Bob Smith", "Dr Okafor", "Zoë Martin", "Acme Corp", "Berlin", "St Louis",
            "The Beatles", "Anna"]


@pytest.mark.parametrize("name,expected", [
    ("Bob", "Bob Smith"),
    ("bob smith", "Bob Smith"),
    ("Smith", "Bob Smith"),
    ("dr okafor", "Dr Okafor"),
    ("Dr. Okafor", "Dr Okafor"),
    ("DR OKAFOR", "Dr Okafor"),
    ("Okafor", "Dr Okafor"),
    ("Zoe", "Zoë Martin"),
    ("zoe martin", "Zoë Martin"),
    ("Acme", "Acme Corp"),
    ("berlin", "Berlin"),
    ("Anna Schmidt", "Anna"),
    ("Bob's", "Bob Smith"),
    ("Mr Okafor", None),          # a different title is a different person
    ("Dr Smith", None),
    ("Bob Jones", None),
    ("Louis", None),              # not a person's first name
    ("Beatles", None),
    ("Al", None),                 # no substring matches
    ("Bo", None),
    ("Robert", None),
    ("The", None),
    ("", None),
])
def test_canonical_entity(name, expected):
    assert canonical_entity(name, EXISTING) == expected


def test_canonical_entity_ambiguity():
    assert canonical_entity("Bob", ["Bob Smith", "Bob Jones"]) is None
    assert canonical_entity("Anna Schmidt", ["Anna", "Anna Berg"]) is None
    assert canonical_entity("Bob", []) is None
    assert canonical_entity("Bob", iter(["Bob Smith"])) == "Bob Smith"   # any iterable


@pytest.mark.parametrize("text", ["User: my dog is called", "User: My favourite cat is named"])
def test_a_role_named_at_the_end_of_a_clause_is_no_fact_and_no_crash(text):
    """Found on a real conversation (issue 18's dev set): the ingest failed with IndexError."""
    for spec in (IDENTITY, CHATBOT, PRODUCTIVITY):
        found = extract(text, spec)
        assert not any(f.object in ("called", "named", "") for f in found.facts)


# ── issue 18, behaviour 5: the common personal facts ────────────────────────────────────
PERSONAL = [
    # the date of a recurring event, not only an age that goes stale
    ("Lena turns 10 on May 3rd.",
     {("Lena", "HAS_BIRTHDAY", "May 3rd")}, True),
    ("My son Tom turned 12 on 4 March.", {("Tom", "HAS_BIRTHDAY", "4 March")}, True),
    # a job change: the new employer (supersedes the old) and the title
    ("I quit Siemens and joined a startup called Nordlicht as CTO.",
     {("User", "WORKS_AT", "Nordlicht"), ("User", "WORKS_AS", "CTO"),
      ("User", "QUIT_JOB_AT", "Siemens")}, True),
    ("I joined Bosch as a data engineer last month.",
     {("User", "WORKS_AT", "Bosch"), ("User", "WORKS_AS", "data engineer")}, True),
    # diets
    ("I'm pescatarian now.", {("User", "HAS_DIET", "pescatarian")}, True),
    ("I went vegan in January.", {("User", "HAS_DIET", "vegan")}, True),
    # plans
    ("I'm going to visit my grandparents in Porto next month.",
     {("User", "HAS_PLAN", "visit grandparents in Porto")}, False),
    ("We're going to Lisbon in April.", set(), False),
    ("I'm going to Iceland in April.", {("User", "HAS_PLAN", "go to Iceland")}, False),
    # possessions
    ("I bought a Kindle Paperwhite last week.", {("User", "OWNS", "Kindle Paperwhite")}, False),
    # what the assistant recommended (the user asks later "what was that book you told me about?")
    ("User: Any novel for the flight?\nAssistant: I'd recommend \"Piranesi\" by Susanna Clarke.",
     {("Assistant", "RECOMMENDED", "Piranesi")}, False),
    ("User: Thanks.\nAssistant: You might also enjoy The Left Hand of Darkness.",
     {("Assistant", "RECOMMENDED", "The Left Hand of Darkness")}, False),
    ("User: I finally read the book you recommended, Sapiens.\nAssistant: Great!",
     {("Assistant", "RECOMMENDED", "Sapiens")}, False),
    ("User: Last week you recommended Sapiens to me.\nAssistant: I did.",
     {("Assistant", "RECOMMENDED", "Sapiens")}, False),
]


@pytest.mark.parametrize("text,expected,functional", PERSONAL, ids=[p[0][:40] for p in PERSONAL])
def test_common_personal_facts(text, expected, functional):
    result = run(text)
    assert expected <= triples(result), triples(result)
    for f in result.facts:
        if (f.subject, f.relation, f.object) in expected and f.relation != "QUIT_JOB_AT":
            assert f.functional is functional, f
    assert_clean(result)


@pytest.mark.parametrize("text", [
    "I'm not vegetarian anymore.", "I might join Acme as CTO.", "I'm going to bed.",
    "If I were vegan I would cook more.", "Should I buy a Kindle?",
    "User: Can you recommend a good novel?\nAssistant: What do you like?",
])
def test_no_personal_fact_from_what_is_not_asserted(text):
    relations = {r for _, r, _ in triples(run(text))}
    assert not relations & {"HAS_DIET", "WORKS_AT", "WORKS_AS", "HAS_PLAN", "OWNS",
                            "RECOMMENDED"}, relations


def test_fact_sentences_of_personal_facts():
    sentences = {f.fact for t, _, _ in PERSONAL for f in run(t).facts}
    assert {"Lena's birthday is May 3rd", "User works at Nordlicht", "User works as CTO",
            "User's diet is pescatarian", "User bought a Kindle Paperwhite",
            "Assistant recommended Piranesi"} <= sentences


# ── issue 18, behaviour 6: tags per fact, not per turn ─────────────────────────────────
def test_each_fact_has_the_tags_of_its_own_sentence():
    """The turn's emotion (sad, in its first sentence) is not copied onto the fact about the
    cat, and a verb "book" tags nothing as books."""
    tagged = mode_spec("Chatbot")
    result = extract("User: I'm so sad today, my grandmother is in hospital. "
                     "My cat Pistachio only eats salmon. "
                     "I need to book a check-up with my dentist.\nAssistant: Sorry to hear that.",
                     tagged)
    by_relation = {f.relation: f.tags for f in result.facts}
    assert "emotion:sad" not in by_relation["HAS_CAT"], by_relation
    assert "topic:pets" in by_relation["HAS_CAT"], by_relation
    assert not any("books" in t for t in by_relation["HAS_TASK"]), by_relation
    # the turn still has its emotion (as an Emotion entity)
    assert ("sad", "Emotion") in {(e.name, e.type) for e in result.entities}


# ── reading a search query ────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("query, names, read", [
    ("Where does Mira live now?", ["Mira"], ("Where does I live now?", ["Mira"])),
    ("What is Mira's job?", ["Mira"], ("What is my job?", ["Mira"])),
    ("where does mira novak live", ["Mira Novak"], ("where does I live", ["mira novak"])),
    ("Where does Mira work?", ["Mira Novak"], ("Where does I work?", ["Mira"])),
    ("Where does Miranda live?", ["Mira"], None),           # a whole name only
    ("Will I need a visa?", ["Will"], None),                # a common word starting a sentence
    ("what will i do in june", ["Will", "June"], None),     # lowercase: the words
    ("Where does Anna live?", [], None),
])
def test_the_users_names_are_read_as_the_user(query, names, read):
    assert as_the_user(query, names) == read


def test_a_role_is_also_asked_in_the_other_words_of_its_family():
    refs = role_references("Who is my boss?")
    assert refs[0] == ("my boss", "HAS_BOSS")           # the word itself first
    assert ("my boss", "HAS_MANAGER") in refs and ("my boss", "HAS_SUPERVISOR") in refs
    assert ("my husband", "HAS_PARTNER") in role_references("Where does my husband work?")


def test_family_words_stand_for_each_other_and_narrower_ones_only_for_the_wider():
    assert {"diet", "pescatarian", "vegan"} <= set(family_words("Am I vegetarian?"))
    assert "manager" in family_words("Who is my boss?")
    assert {"son", "daughter"} <= set(family_words("my kid"))
    assert "daughter" not in family_words("my son") and "child" in family_words("my son")
    assert "managers" in family_words("my bosses")
    assert family_words("Where do I live?") == []


def test_a_query_pointing_back_in_time_or_to_the_assistants_words_is_read():
    from memoryplus.engine.extract import asks_about_assistant, days_ago
    assert days_ago("What did I buy two weeks ago?") == 14
    assert days_ago("Who did I meet 3 days ago at the fair?") == 3
    assert days_ago("What was I reading last month?") == 30.4
    assert days_ago("Where did I go yesterday?") == 1
    assert days_ago("Where do I go hiking?") is None
    assert days_ago("I'm planning ahead for next week") is None
    assert asks_about_assistant("Can you remind me of the book you recommended?")
    assert asks_about_assistant("In our previous chat, what did you say about tea?")
    assert not asks_about_assistant("Which book did my sister recommend?")
    assert not asks_about_assistant("Do you think I should go?")


def test_questions_that_add_up_compare_or_order_occasions_are_told():
    from memoryplus.engine.extract import asks_for_several
    for q in ("How many books did I read this year?", "What is the total cost of the repairs?",
              "How much faster was my run compared to last year?", "Which did I buy first, the bike or the tent?",
              "What is the order of the three concerts I went to?", "Which course did I finish most recently?"):
        assert asks_for_several(q), q
    for q in ("Where does my sister live?", "What was my first car?", "Who is my boss?"):
        assert not asks_for_several(q), q
