"""Offline emotion, topic and vibe analysis (the earlier plugin's mistakes: item 9)."""
from __future__ import annotations

import time

import pytest

from memoryplus.engine.insight_words import EMOTION_NAMES, TOPIC_NAMES
from memoryplus.engine.insights import (
    Insights,
    analyze,
    canonical_emotion,
    vibe_from_emotions,
)

LEVELS = ("Low", "Medium", "High")


def emotions(text, sensitivity="Medium"):
    return analyze(text, sensitivity=sensitivity, topics=False).emotions


def topics(text):
    return analyze(text, emotions=False).topics


# ── emotions ────────────────────────────────────────────────────────────────────────────

NEUTRAL = [
    "What is the capital of France?",
    "How do I install Python on Ubuntu?",
    "Can you explain how DNS works?",
    "Why does my display flicker after the update?",
    "Please summarise this article in three bullet points.",
    "Where should I put the config file?",
    "Convert 5 miles to kilometres.",
    "The meeting moved to Thursday at 3pm.",
    "Which is faster, a list or a tuple?",
    "Who wrote The Left Hand of Darkness?",
    "I need the report in PDF format.",
    "Set a timer for ten minutes.",
]


@pytest.mark.option("emotion_tagging")
@pytest.mark.parametrize("sensitivity", LEVELS)
def test_plain_questions_and_requests_carry_no_emotion(sensitivity):
    # the earlier plugin tagged every turn "curious"
    for text in NEUTRAL:
        assert emotions(text, sensitivity) == [], text


@pytest.mark.option("emotion_sensitivity")
@pytest.mark.parametrize("text,low,medium,high", [
    ("I'm furious, the build broke again!", ["angry"], ["angry"], ["angry"]),
    ("I hate this printer.", ["angry"], ["angry"], ["angry"]),
    ("I'm frustrated with my code.", [], ["frustrated"], ["frustrated"]),
    ("I'm so frustrated with my code.", ["frustrated"], ["frustrated"], ["frustrated"]),
    ("I'm SO EXCITED", ["excited"], ["excited"], ["excited"]),
    ("I can't wait for the concert tonight!", ["excited"], ["excited"], ["excited"]),
    ("haha that's hilarious", [], ["amused"], ["amused"]),
    ("lol ok", [], [], ["amused"]),
    ("hmm, not sure", [], [], ["curious"]),
    ("ugh, Mondays", [], [], ["frustrated"]),
    ("see you later :)", [], [], ["happy"]),
    ("sounds good 🙂", [], [], ["happy"]),
    ("thanks", [], [], ["grateful"]),
    ("Thank you so much for your help!", ["grateful"], ["grateful"], ["grateful"]),
    ("I'm anxious about my exam tomorrow.", [], ["anxious"], ["anxious"]),
    ("I'm sooo tired", ["tired"], ["tired"], ["tired"]),
])
def test_sensitivity_levels(text, low, medium, high):
    assert emotions(text, "Low") == low
    assert emotions(text, "Medium") == medium
    assert emotions(text, "High") == high


def test_higher_sensitivity_never_loses_an_emotion():
    texts = NEUTRAL + ["I'm frustrated lol", "ugh I'm so tired 😴", "wow, thanks!",
                       "I'm worried but hopeful", "haha I'm embarrassed 😅"]
    for text in texts:
        low, med, high = (set(emotions(text, s)) for s in LEVELS)
        assert low <= med <= high or len(high) == 3, text


@pytest.mark.parametrize("text,absent", [
    ("I'm not happy with the results.", "happy"),
    ("Don't worry about it.", "anxious"),
    ("I'm not worried at all.", "anxious"),
    ("I'm not angry, just tired.", "angry"),
    ("It wasn't funny.", "amused"),
    ("I never get bored of this.", "bored"),
])
def test_negation(text, absent):
    for level in LEVELS:
        assert absent not in emotions(text, level)


def test_not_happy_reads_as_disappointed_and_the_clause_after_but_counts():
    assert emotions("I'm not happy with this result") == ["disappointed"]
    assert emotions("I'm not angry, but I'm really sad") == ["sad"]


def test_words_inside_other_words_do_not_count():
    assert emotions("The madness of category theory and the hateful eight", "High") == []
    assert emotions("Thanksgiving is in November", "High") == []
    assert emotions("I read a hilariously long thread", "High") == []   # not "hilarious"


def test_only_the_users_lines_carry_the_users_emotion():
    body = ("User: can you list the files in this folder\n"
            "Assistant: I'm so excited to help! Happy to do it, thank you for asking.")
    assert emotions(body, "High") == []
    body = "User: I'm so stressed about the move\nAssistant: I'm happy to help you plan it."
    assert emotions(body) == ["anxious"]


def test_emotions_are_lowercase_names_from_the_vocabulary():
    text = ("I'm furious and frustrated, also so excited, a bit anxious, grateful, confused, "
            "surprised lol 😂")
    for level in LEVELS:
        found = emotions(text, level)
        assert found and len(found) <= 3
        assert all(e in EMOTION_NAMES and e == e.lower() for e in found)


def test_emotions_off():
    assert analyze("I'm furious!!", emotions=False).emotions == []


def test_unknown_sensitivity_is_refused():
    with pytest.raises(ValueError):
        analyze("hello", sensitivity="Extreme")
    assert analyze("I'm furious", sensitivity="low").emotions == ["angry"]


# ── topics ──────────────────────────────────────────────────────────────────────────────

@pytest.mark.option("topic_tagging")
@pytest.mark.parametrize("text,expected", [
    ("How do I install Python on Ubuntu?", {"programming", "linux"}),
    ("My ubuntu kernel panics after a systemd update", {"linux"}),
    ("I was cooking pasta and the oven broke", {"cooking"}),
    ("We're planning a trip to Japan, need a hotel and flights", {"travel"}),
    ("My boss scheduled a meeting about my promotion", {"work"}),
    ("I play guitar and we have a concert on Friday", {"music"}),
    ("The game last night was great, our team won the match", {"sports"}),
    ("I just bought a PS5 and Elden Ring", {"gaming"}),
    ("My doctor changed my blood pressure medication", {"health"}),
    ("Should I put my savings in an index fund or pay off the mortgage?", {"finance"}),
    ("My sister and my parents are visiting with the kids", {"family"}),
    ("Our sprint backlog and roadmap need a cleanup before the milestone",
     {"project management"}),
])
def test_topics(text, expected):
    found = topics(text)
    assert expected <= set(found), (text, found)
    assert all(t in TOPIC_NAMES and t == t.lower() for t in found)


@pytest.mark.parametrize("text", [
    "My display is flickering after the update.",       # the earlier plugin said gaming
    "Display the results in a table please.",
    "The category field is wrong.",                     # no "cat" inside "category"
    "She played a key role in the negotiation.",
    "What's the capital of France?",
    "Can you reformat this paragraph?",
    "I'll get back to you tomorrow.",
    "The concatenation of two strings",                 # no "cat" either
])
def test_no_topic_from_unrelated_or_partial_words(text):
    assert topics(text) == [], text


def test_weak_cues_need_company():
    assert "gaming" not in topics("That was a good game of cards.")   # one weak cue
    assert topics("I bought a new console and a controller for it") == ["gaming"]


def test_plurals_and_case_and_at_most_three():
    assert topics("RECIPES for Sourdough") == ["cooking"]
    many = ("python code, ubuntu kernel, hotel flight, guitar concert, doctor prescription, "
            "mortgage budget, football league")
    assert len(topics(many)) == 3


def test_topics_off():
    assert analyze("linux kernel on ubuntu", topics=False).topics == []


# ── vibe ────────────────────────────────────────────────────────────────────────────────

@pytest.mark.option("vibe_scoring")
def test_vibe_is_none_when_off_and_a_score_when_on():
    assert analyze("I'm so happy!").vibe is None
    assert analyze("Set a timer for ten minutes.", vibe=True).vibe == 0.5
    happy = analyze("I'm so happy, this is great!", vibe=True).vibe
    angry = analyze("This is terrible, I'm furious and it's broken again.", vibe=True).vibe
    mild = analyze("ok thanks", vibe=True).vibe
    assert 0.0 <= angry < 0.3 < 0.5 < mild < happy <= 1.0


def test_vibe_does_not_depend_on_the_emotion_switch():
    text = "I'm really disappointed, nothing works"
    assert analyze(text, vibe=True).vibe == analyze(text, vibe=True, emotions=False).vibe < 0.5


def test_vibe_negation():
    assert analyze("not bad at all", vibe=True).vibe > 0.5
    assert analyze("not good", vibe=True).vibe < 0.5


def test_vibe_from_emotions():
    assert vibe_from_emotions([]) is None
    assert vibe_from_emotions(["quizzical", ""]) is None
    assert vibe_from_emotions(["happy"]) > 0.8
    assert vibe_from_emotions(["angry"]) < 0.2
    assert vibe_from_emotions(["happy", "angry"]) == pytest.approx(0.48, abs=0.02)
    # names an LLM may produce
    assert vibe_from_emotions(["Joyful"]) == vibe_from_emotions(["happy"])
    assert vibe_from_emotions(["annoyed", "NERVOUS"]) < 0.3
    for name in EMOTION_NAMES:
        value = vibe_from_emotions([name])
        assert value is not None and 0.0 <= value <= 1.0


def test_canonical_emotion():
    assert canonical_emotion("Frustrated") == "frustrated"
    assert canonical_emotion(" irritated ") == "frustrated"
    assert canonical_emotion("neutral") is None
    assert canonical_emotion("banana") is None


# ── general ─────────────────────────────────────────────────────────────────────────────

def test_result_shape_and_determinism():
    text = "User: ugh, my linux laptop crashed again 😤 lol\nAssistant: Sorry to hear that!"
    first = analyze(text, sensitivity="High", vibe=True)
    assert isinstance(first, Insights)
    for _ in range(5):
        assert analyze(text, sensitivity="High", vibe=True) == first
    assert first.topics[0] == "linux" and "frustrated" in first.emotions


def test_odd_input():
    assert analyze("") == Insights([], [], None)
    assert analyze(None) == Insights([], [], None)  # type: ignore[arg-type]
    assert analyze("🙂" * 5000, sensitivity="High").emotions == ["happy"]
    assert analyze("Zoë est très heureuse 😊", sensitivity="High").emotions == ["happy"]


def test_speed_10kb():
    text = ("User: I'm so frustrated, my Linux kernel build keeps failing and the display "
            "flickers. lol. Thanks a lot for the help with the Python debugger! " * 80)[:10_000]
    analyze(text, sensitivity="High", vibe=True)
    start = time.perf_counter()
    for _ in range(10):
        analyze(text, sensitivity="High", vibe=True)
    per_call = (time.perf_counter() - start) / 10
    assert per_call < 0.025, f"{per_call * 1000:.1f} ms for 10 kB"


def test_huge_input_is_bounded():
    start = time.perf_counter()
    analyze("I love cooking. " * 70_000, vibe=True)        # ~1 MB
    assert time.perf_counter() - start < 1.0
