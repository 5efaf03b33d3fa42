"""What a user sees of recall (issue 18): results that each bring a different memory, and the
conversation's own time as "now"."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from memoryplus.wire.records import Turn

T0 = datetime(2023, 5, 1, 9, tzinfo=timezone.utc)
BANK = "current.chat"


def turn(i, user, assistant="Noted.", days=0):
    return Turn(id=str(i), user=user, assistant=assistant, time=T0 + timedelta(days=days))


async def test_one_turn_does_not_fill_the_first_results(engine):
    """One message about a sister gave the turn, its fact and two summaries in the top five,
    crowding out the other turns about her."""
    await engine.ingest(BANK, [
        turn(1, "My sister Anna lives in Tromso, up in the north of Norway."),
        turn(2, "Anna called me yesterday, she is training for a marathon.", days=3),
        turn(3, "I bought a birthday present for my sister Anna: a red scarf.", days=9),
        turn(4, "I need to book a dentist appointment next week.", days=12),
    ])
    results = await engine.search(BANK, "What do you know about my sister Anna?", limit=5)
    firsts = [r.sources[0] for r in results]
    assert {"1", "2", "3"} <= set(firsts[:3]), [(r.kind, r.sources, r.text[:50]) for r in results]
    # a turn already shown comes again only after every other turn that was found
    distinct = list(dict.fromkeys(firsts))
    assert firsts[:len(distinct)] == distinct


async def test_the_conversations_time_is_now(engine):
    """A search with the conversation's date as `now` (an import, a replayed chat, a benchmark
    question) finds the entities and summaries built from its turns, dated by those turns."""
    await engine.ingest(BANK, [turn(1, "My sister Anna lives in Tromso."),
                               turn(2, "Anna moved to Bergen last month.", days=40)])
    asked = T0 + timedelta(days=60)
    results = await engine.search(BANK, "Where does Anna live?", limit=10, now=asked)
    entities = [r for r in results if r.kind == "entity"]
    assert entities, "entities are dated by their turns (2023), not by the machine's clock"
    assert all(r.valid_at <= asked for r in results)
    anna = next(r for r in entities if r.text.startswith("Anna"))
    assert anna.valid_at == T0 + timedelta(days=40), "a summary is as new as its newest turn"
    # "now" is not as_of: a question about the past still finds what was replaced
    before = await engine.search(BANK, "Where did Anna live before?", limit=10, now=asked)
    assert any("Tromso" in r.text for r in before)
    # and nothing said after "now" is known yet
    early = await engine.search(BANK, "Where does Anna live?", limit=10, now=T0 + timedelta(days=2))
    assert early and not any("Bergen" in r.text for r in early)
    # as_of at a date of the conversation keeps its entities too
    past = await engine.search(BANK, "Anna", limit=10, as_of=T0 + timedelta(days=2))
    assert any(r.kind == "entity" for r in past)


async def test_a_replaced_fact_is_not_shown_as_current(engine):
    """After "I live in Berlin" and then "I live in Lisbon now", "where do I live" gave the
    Berlin turn first, as current, and a user summary saying both."""
    await engine.ingest(BANK, [turn(1, "I live in Berlin."),
                               turn(2, "My cat Pistachio needs new food.", days=5),
                               turn(3, "I live in Lisbon now.", days=30)])
    results = await engine.search(BANK, "Where do I live?", limit=5)
    assert "Lisbon" in results[0].text, [(r.kind, r.text[:40]) for r in results]
    for r in results:
        if "Berlin" in r.text:
            assert r.invalid_at == T0 + timedelta(days=30), f"shown as current: {r.kind} {r.text!r}"
    user = next(r for r in await engine.search(BANK, "tell me about the user", limit=10)
                if r.kind == "entity" and r.name == "User")
    assert "Lisbon" in user.text and "Berlin" not in user.text, user.text
    # asked about the past, the Berlin turn is the answer
    before = await engine.search(BANK, "Where did I live before Lisbon?", limit=5)
    assert any("Berlin" in r.text for r in before[:3])


async def test_the_common_personal_facts_are_found_and_kept_current(engine):
    """Local extraction missed birthdays, job changes, diets and what the assistant
    recommended (issue 18, behaviour 5); single-valued ones replace the old value."""
    await engine.ingest(BANK, [
        turn(1, "I work at Siemens as an engineer."),
        turn(2, "I'm vegetarian."),
        turn(3, "My daughter Lena turns 7 on May 3rd."),
        turn(4, "Any novel for my flight?", "I'd recommend \"Piranesi\" by Susanna Clarke.", days=2),
        turn(5, "I quit Siemens and joined a startup called Nordlicht as CTO.", days=20),
        turn(6, "I'm pescatarian now.", days=25),
    ])

    async def facts(query):
        return [r for r in await engine.search(BANK, query, limit=10) if r.kind == "fact"]

    work = await facts("Where do I work?")
    assert any(r.text == "User works at Nordlicht" and r.invalid_at is None for r in work), \
        [(r.text, r.invalid_at) for r in work]
    assert not any("Siemens" in r.text and "works at" in r.text and r.invalid_at is None
                   for r in work), [(r.text, r.invalid_at) for r in work]
    diet = await facts("What is my diet?")
    assert any(r.text == "User's diet is pescatarian" for r in diet), [r.text for r in diet]
    # the vegetarian turn is shown as ended, not as current
    old = [r for r in await engine.search(BANK, "Am I still vegetarian?", limit=5)
           if r.kind == "episode" and "vegetarian" in r.text]
    assert old and all(r.invalid_at == T0 + timedelta(days=25) for r in old), old
    birthday = await facts("When is Lena's birthday?")
    assert any(r.text == "Lena's birthday is May 3rd" for r in birthday), [r.text for r in birthday]
    told = await facts("What did you recommend?")
    assert any(r.text == "Assistant recommended Piranesi" for r in told), [r.text for r in told]


async def test_tags_say_what_the_text_is_about(engine):
    """'[TOPIC: books]' on "book a check-up", '[EMOTION: sad]' on a cat's upset stomach
    (issue 18, behaviour 6)."""
    await engine.ingest(BANK, [
        turn(1, "I need to book a check-up with my dentist."),
        turn(2, "My cat Pistachio gets an upset stomach from her new food.", days=1),
        turn(3, "I just finished a great book by Ursula Le Guin.", days=2),
    ])
    tags = {r.sources[0]: r.tags for r in await engine.search(BANK, "check-up cat book", limit=10)
            if r.kind == "episode"}
    assert "topic:books" not in tags["1"], tags
    assert "emotion:sad" not in tags["2"], tags
    assert "topic:books" in tags["3"], tags       # the noun still is


async def test_a_fact_carries_the_tags_of_its_own_sentence(engine):
    """A turn's tags are not copied onto every fact from it (issue 18, behaviour 6): the
    sadness of one sentence does not tag a fact told in another."""
    await engine.ingest(BANK, [turn(1, "I'm so sad today, my old dog died this morning. "
                                       "By the way, my sister Anna lives in Porto.")])
    found = await engine.search(BANK, "where does Anna live", limit=10)
    episode = next(r for r in found if r.kind == "episode")
    fact = next(r for r in found if r.kind == "fact" and "Porto" in r.text)
    assert "emotion:sad" in episode.tags, episode.tags      # the turn is sad
    assert "emotion:sad" not in fact.tags, fact.tags        # where Anna lives is not


async def test_the_users_own_name_is_the_user(engine):
    """A user who said "Hi, I'm Mira" and later asks "Where does Mira live now?" asks where
    they live: the user and their name are one person to search (issue 18, behaviour 3)."""
    await engine.ingest(BANK, [
        turn(1, "Hi, I'm Mira.", "Nice to meet you, Mira!"),
        turn(2, "I live in Berlin.", days=1),
        turn(3, "My friend Jonas lives in Munich.", days=3),
        turn(4, "My sister Anna lives in Porto.", days=5),
        turn(5, "I live in Lisbon now.", days=30),
    ])
    where = await engine.search(BANK, "Where does Mira live now?", limit=10)
    assert "Lisbon" in where[0].text, shown(where)
    assert any(r.kind == "fact" and r.text == "User lives in Lisbon" for r in where), shown(where)
    for r in where:
        if "Berlin" in r.text and r.kind != "entity":
            assert r.invalid_at == T0 + timedelta(days=30), f"shown as current: {r.kind} {r.text!r}"
    # her sister is "my sister" (Anna), not another name to look up
    sister = await engine.search(BANK, "Where does Mira's sister live?", limit=5)
    assert "Porto" in sister[0].text, shown(sister)


def shown(results):
    return [(r.kind, r.text[:50], r.invalid_at) for r in results]


async def test_a_role_asked_in_other_words_finds_the_person(engine):
    """"Who is my boss?" after "My manager Tomasz wants the Q3 report by Friday" found nothing
    (issue 18, behaviour 4): a role word stands for the other words of its family."""
    await engine.ingest(BANK, [
        turn(1, "My sister Anna lives in Porto."),
        turn(2, "My manager Tomasz wants the Q3 report by Friday.", days=2),
        turn(3, "My friend Jonas is visiting next week.", days=3),
        turn(4, "I need to book a dentist appointment.", days=4),
        turn(5, "My partner Alex works at a bakery.", days=6),
    ])
    boss = await engine.search(BANK, "Who is my boss?", limit=5)
    assert boss and "Tomasz" in boss[0].text, shown(boss)
    spouse = await engine.search(BANK, "Where does my husband work?", limit=5)
    assert spouse and "Alex" in spouse[0].text, shown(spouse)


async def test_a_new_boss_or_name_is_found_by_the_very_next_search(engine):
    """The user's facts a search reads (their names, the people of their roles) are kept
    between searches: what the user says next must still count at once."""
    await engine.ingest(BANK, [
        turn(1, "Hi, I'm Mira.", "Nice to meet you, Mira!"),
        turn(2, "My manager Tomasz wants the Q3 report by Friday.", days=2),
        turn(3, "I live in Lisbon.", days=3),
    ])
    assert "Tomasz" in (await engine.search(BANK, "Who is my boss?", limit=5))[0].text
    assert "Lisbon" in (await engine.search(BANK, "Where does Mira live?", limit=5))[0].text
    await engine.ingest(BANK, [
        turn(4, "My new manager is Ewa, Tomasz moved to Oslo.", days=10),
        turn(5, "Please call me Nora from now on, my name is Nora.", days=11),
    ])
    boss = await engine.search(BANK, "Who is my boss?", limit=5)
    assert boss and "Ewa" in boss[0].text, shown(boss)
    where = await engine.search(BANK, "Where does Nora live?", limit=5)
    assert where and "Lisbon" in where[0].text, shown(where)


async def test_a_diet_asked_by_another_name_finds_the_current_one(engine):
    """"Am I vegetarian?" after "I'm pescatarian now" returned only the old vegetarian turn
    (issue 18, behaviour 4): the current diet comes first, the old one as ended."""
    await engine.ingest(BANK, [
        turn(1, "I'm vegetarian."),
        turn(2, "My sister Anna lives in Porto.", days=2),
        turn(3, "I need to book a dentist appointment.", days=4),
        turn(4, "I'm pescatarian now.", days=25),
    ])
    diet = await engine.search(BANK, "Am I vegetarian?", limit=10)
    assert diet and "pescatarian" in diet[0].text, shown(diet)
    assert any(r.kind == "fact" and r.text == "User's diet is pescatarian" for r in diet), shown(diet)
    assert all(r.invalid_at == T0 + timedelta(days=25) for r in diet
               if "vegetarian" in r.text and r.kind != "entity"), shown(diet)


async def test_a_question_pointing_back_in_time_finds_the_turn_of_that_time(engine):
    """'What did I cook four weeks ago?': of several turns about cooking, the one said about
    four weeks before the question comes first, and it says when it was said."""
    await engine.ingest(BANK, [
        turn(1, "I cooked a big pot of lentil soup for the whole family tonight."),
        turn(2, "I cooked dinner again tonight, cooking a spicy cooked cooking Thai green curry "
                "I cooked for friends.", days=14),
        turn(3, "Work was busy, I have three reports to finish.", days=20),
    ])
    asked = T0 + timedelta(days=28, hours=3)
    results = await engine.search(BANK, "What did I cook four weeks ago?", limit=5, now=asked)
    assert results and results[0].sources[0] == "1", [(r.sources, r.text[:40]) for r in results]
    assert results[0].valid_at == T0


async def test_a_question_about_what_the_assistant_said_reads_its_replies(engine):
    """'Remind me of the novel you recommended': the title is in the assistant's reply, and
    the user's message of that turn says little; another turn's user message talks about
    novels and recommendations but holds no answer."""
    await engine.ingest(BANK, [
        turn(1, "I have a long train ride on Saturday, what could I take along?",
             "For the train I recommend the novel 'The Dispossessed' by Ursula K. Le Guin."),
        turn(2, "My friend recommended a novel to me and I recommended one to her, we both "
                "love recommending novels.", "That sounds like a lovely exchange.", days=2),
        turn(3, "I need to water the plants.", "Good idea.", days=3),
    ])
    results = await engine.search(BANK, "Can you remind me of the novel you recommended for my "
                                  "train ride?", limit=5, now=T0 + timedelta(days=10))
    assert results and results[0].sources[0] == "1", [(r.sources, r.text[:40]) for r in results]
