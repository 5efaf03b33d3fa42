"""Memory modes: what graphiti extracts from a turn, mode by mode.

Each of the nine memory modes is its own ontology: a set of graphiti entity types, edge
(fact) types with their signatures, and extraction instructions. The engine passes them
straight to ``Graphiti.add_episode(entity_types=..., edge_types=..., edge_type_map=...,
custom_extraction_instructions=...)``, so the mode changes what ends up in the graph (the
earlier plugin only changed the prompt of a separate call whose text was pasted into the
episode). The local engine (``local_extract``) types its entities with the same types,
using each type's cue words.

Every type model is a pydantic model with a docstring and no fields. graphiti shows the
docstring to the LLM as the type's description; each field would cost one more LLM call
per extracted node (attribute extraction), so there are none.

With emotion or topic tagging on, ``Emotion`` and ``Topic`` entity types are added, so
that graphiti's single node-extraction call also yields the turn's emotion and topic tags
(as entities the episode MENTIONS) instead of a separate insight call per turn.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from pydantic import BaseModel

from ..config.schema import MEMORY_MODES, defaults, option
from .insight_words import EMOTION_NAMES, TOPIC_NAMES

# graphiti's own node labels and edge names: a custom type must not take one of them.
RESERVED_TYPE_NAMES = frozenset({"Entity", "Episodic", "Community", "Saga"})
RESERVED_EDGE_NAMES = frozenset({"RELATES_TO", "MENTIONS", "HAS_MEMBER", "HAS_EPISODE",
                                 "NEXT_EPISODE"})
SENSITIVITIES: tuple[str, ...] = option("emotion_sensitivity").choices   # declared in the schema


@dataclass(frozen=True)
class ModeSpec:
    """One memory mode, ready for ``Graphiti.add_episode``. Treat the dicts as read-only."""
    name: str
    entity_types: dict[str, type[BaseModel]]          # add_episode(entity_types=...)
    edge_types: dict[str, type[BaseModel]]            # add_episode(edge_types=...)
    edge_type_map: dict[tuple[str, str], list[str]]   # add_episode(edge_type_map=...)
    instructions: str                                 # add_episode(custom_extraction_instructions=...)
    gate: bool                                        # MemoryGate: decide per turn whether to store
    cues: dict[str, tuple[str, ...]]                  # entity type -> lowercase cue words (local typing)
    emotion_sensitivity: str = "Medium"               # Low / Medium / High, for local emotion tags
    # local extraction: a name only the assistant mentioned is an entity too (the modes that
    # study what is said; the others skip "the assistant's explanations")
    assistant_names: bool = False

    @property
    def tagging(self) -> bool:
        return "Emotion" in self.entity_types or "Topic" in self.entity_types


# ── Entity types: name -> (docstring shown to the LLM, cue words for local typing) ─────────

_ENTITY: dict[str, tuple[str, tuple[str, ...]]] = {
    "Person": (
        "A specific human being: someone named (Ada Lovelace, Dr Okafor), a speaker of the "
        "conversation (User, Assistant), or a person identified by their relation to a named "
        "person (User's dentist, Bob's sister).",
        ("person", "dr", "mr", "mrs", "ms", "miss", "prof", "professor", "sir", "dame", "aunt",
         "uncle", "mom", "mum", "dad", "mother", "father", "sister", "brother", "wife",
         "husband", "partner", "girlfriend", "boyfriend", "son", "daughter", "friend", "boss",
         "manager", "colleague", "coworker", "dentist", "doctor", "therapist", "teacher",
         "neighbour", "neighbor", "cousin", "grandma", "grandpa", "met", "told", "asked",
         "said", "says", "thinks", "married", "author", "researcher")),
    "Place": (
        "A specific geographic location or venue: a city, country, region, address, building, "
        "landmark, park or restaurant (Berlin, Lake Como, the Louvre).",
        ("place", "city", "town", "village", "country", "street", "st", "road", "avenue",
         "lake", "mount", "river", "island", "park", "beach", "airport", "station", "region",
         "state", "province", "county", "district", "square", "bay", "valley", "restaurant",
         "cafe", "hotel", "museum")),
    "Organization": (
        "A company, institution, team, school, university, club, government body or other "
        "named organization (Acme Corp, MIT, the Chess Club).",
        ("organization", "organisation", "company", "inc", "corp", "corporation", "ltd",
         "llc", "gmbh", "plc", "university", "college", "school", "institute", "bank",
         "agency", "club", "foundation", "ministry", "department", "hospital", "team",
         "association", "society", "group", "labs", "studio", "studios")),
    "Trait": (
        "A lasting characteristic of a person: a skill, language spoken, occupation, "
        "personality trait, health condition, allergy, diet, or age.",
        ("trait", "skill", "language", "occupation", "profession", "allergy", "allergic",
         "condition", "diet", "age", "vegetarian", "vegan", "personality", "health")),
    "Preference": (
        "Something a person likes, loves, dislikes, prefers or avoids: a food, hobby, "
        "activity, style, brand or product (cooking, jazz, dark mode, sushi).",
        ("preference", "favourite", "favorite", "hobby", "food", "dish", "colour", "color",
         "genre", "style", "brand", "band", "cuisine")),
    "LifeEvent": (
        "A dated event in a person's life: a birth, graduation, move, wedding, new job, "
        "illness or trip (User's move to Berlin in 2021).",
        ("event", "wedding", "graduation", "birthday", "anniversary", "funeral", "move",
         "birth", "born")),
    "Task": (
        "A concrete piece of work or to-do item someone has to do: an action, errand, "
        "ticket, bug or deliverable (renew passport, fix login bug, Q3 report).",
        ("task", "todo", "to-do", "ticket", "bug", "issue", "errand", "chore", "report",
         "essay", "assignment", "homework", "deliverable", "review", "draft", "fix")),
    "Goal": (
        "An outcome someone wants to reach over time: a goal, plan, ambition or resolution "
        "(learn Spanish, run a marathon, save for a house).",
        ("goal", "plan", "aim", "ambition", "resolution", "dream", "target", "objective")),
    "Instruction": (
        "A standing instruction or preference about how the assistant should behave or "
        "answer (always answer in French, keep answers short, never use emoji).",
        ("instruction", "always", "never", "rule", "format")),
    "Event": (
        "A specific scheduled or past happening: a meeting, appointment, trip, party, "
        "concert or conference with a time or place (dentist appointment on Monday, "
        "PyCon 2025).",
        ("event", "meeting", "appointment", "party", "concert", "conference", "trip",
         "festival", "wedding", "match", "game", "flight", "interview")),
    "Interest": (
        "A subject, hobby or activity a person is interested in or spends time on "
        "(astronomy, hiking, jazz, chess).",
        ("interest", "hobby", "activity", "preference", "sport", "genre")),
    "Thing": (
        "A specific named or clearly qualified object, product, creative work or animal: a "
        "book, film, game, device, vehicle or pet (Dune, the Gamecube, User's dog Rex).",
        ("thing", "book", "film", "movie", "song", "album", "game", "device", "phone",
         "laptop", "car", "bike", "dog", "cat", "pet", "show", "series", "novel", "product")),
    "Project": (
        "A named or clearly identified piece of ongoing work with a goal: a project, "
        "product, repository, campaign or initiative (the Apollo project, MemoryPlus).",
        ("project", "repo", "repository", "app", "product", "initiative", "campaign",
         "program", "programme", "launch", "release", "website", "site", "migration")),
    "Deadline": (
        "A date or time by which something is due (Friday, 3 March, end of Q3), always "
        "linked to the task or project that is due.",
        ("deadline", "due", "date", "monday", "tuesday", "wednesday", "thursday", "friday",
         "saturday", "sunday", "tomorrow", "today", "tonight", "eod", "eow", "q1", "q2",
         "q3", "q4")),
    "Tool": (
        "A software tool, application, programming language, library, service or device "
        "used to get work done (Python, Jira, VS Code, Figma).",
        ("tool", "software", "editor", "ide", "library", "framework", "language", "service",
         "platform", "api", "cli", "sdk", "plugin", "extension", "database", "uses", "using")),
    "Meeting": (
        "A specific meeting, call or review with a time or participants (Monday stand-up, "
        "design review with Priya).",
        ("meeting", "standup", "stand-up", "sync", "review", "retro", "retrospective",
         "workshop", "demo", "interview", "1:1")),
    "Concept": (
        "An idea, theory, field, technique or term that is discussed or defined "
        "(photosynthesis, transformer architecture, inflation).",
        ("concept", "theory", "idea", "field", "technique", "principle", "model", "law",
         "effect", "hypothesis", "paradigm", "algorithm", "phenomenon", "topic")),
    "Claim": (
        "A specific assertion stated as true or false, in a few words, attributed to its "
        "source when known (coffee raises blood pressure, GPT-4 beats humans on the bar exam).",
        ("claim", "assertion", "finding", "conclusion", "result", "shows", "suggests",
         "argues")),
    "Source": (
        "Where information comes from: a paper, book, article, dataset, website, report or "
        "named expert (Smith et al. 2021, the WHO report, Wikipedia).",
        ("source", "paper", "article", "study", "journal", "book", "dataset", "report",
         "website", "preprint", "arxiv", "doi", "survey", "wikipedia", "et", "al")),
    "DataPoint": (
        "A specific measured or reported quantity with its value and unit (42% response "
        "rate, 3.2 million users, 120 ms latency).",
        ("datapoint", "data", "percent", "%", "million", "billion", "rate", "average",
         "median", "measured", "number", "statistic")),
    "Method": (
        "A research or analytical method, procedure or instrument (randomised controlled "
        "trial, regression analysis, PCR).",
        ("method", "methodology", "procedure", "analysis", "trial", "experiment",
         "regression", "protocol", "approach")),
    "Issue": (
        "The question or subject under debate in the conversation (remote work, nuclear "
        "power, tabs versus spaces).",
        ("issue", "debate", "question", "controversy", "topic", "versus", "vs")),
    "Viewpoint": (
        "A position or stance on an issue, as held by someone or by a school of thought "
        "(remote work boosts productivity, tabs are better than spaces).",
        ("viewpoint", "position", "stance", "view", "side", "perspective", "believes",
         "thinks")),
    "Argument": (
        "A reason or line of reasoning offered for or against a position (commuting wastes "
        "two hours a day).",
        ("argument", "reason", "because", "therefore", "evidence", "premise", "point")),
    "Opinion": (
        "A personal judgement or evaluation a specific person expresses (User finds Rust "
        "hard to learn, Bob thinks the film was overrated).",
        ("opinion", "thinks", "feels", "believes", "finds", "judgement", "judgment")),
    "Evidence": (
        "A fact, example, statistic or source offered to support or refute an argument.",
        ("evidence", "example", "statistic", "study", "data", "proof")),
}

_TAG_CUES = {
    "Emotion": ("emotion",) + EMOTION_NAMES,
    "Topic": ("topic",),
}

_EMOTION_LEVEL = {
    "Low": ("Only extract an emotion the speaker states strongly and explicitly about "
            "themselves (\"I'm furious\", \"I hate this\", \"I'm thrilled\"). Ignore mild, "
            "implied or polite feelings."),
    "Medium": ("Extract emotions the speaker clearly expresses, in words or obviously in "
               "tone (\"I'm frustrated\", \"haha that's hilarious\", \"thank you so much\"). "
               "Ignore faint or uncertain hints."),
    "High": ("Extract clear emotions and also mild or implicit cues: emoji, \"lol\", "
             "\"hmm\", \"ugh\", sighs, exclamation, a weary or cheerful tone."),
}


def _emotion_doc(sensitivity: str) -> str:
    return (
        "The speaker's own emotion in the current message, as one lowercase adjective, "
        "preferably one of: " + ", ".join(EMOTION_NAMES) + ". "
        + _EMOTION_LEVEL[sensitivity]
        + " Never the assistant's politeness, nor read into a plain question.")


_TOPIC_DOC = (
    "What the current message is mainly about, as a lowercase label of one to three words, e.g. "
    + ", ".join(TOPIC_NAMES[:8]) + "; at most three; not a word used in passing.")

# ── Edge types: name -> docstring ─────────────────────────────────────────────────────────

_EDGE: dict[str, str] = {
    "LIVES_IN": "A person currently lives in a place (a new home replaces the old one).",
    "IS_FROM": "A person comes from, or was born or raised in, a place.",
    "WORKS_AT": "A person currently works at or for an organization (a new employer replaces the old one).",
    "HAS_TRAIT": "A person has a lasting characteristic: a skill, language, occupation, condition, diet or age.",
    "LIKES": "A person likes, loves, enjoys or prefers something.",
    "DISLIKES": "A person dislikes, hates or avoids something.",
    "KNOWS": "Two people are related (family, friend, colleague, doctor, boss...); the fact names the role, e.g. 'Dr Okafor is User's dentist'.",
    "EXPERIENCED": "A person went through a life event (a move, wedding, graduation, new job).",
    "HAS_TASK": "A person or project has a task to do.",
    "HAS_GOAL": "A person wants to achieve a goal.",
    "GAVE_INSTRUCTION": "A person told the assistant how to behave or answer from now on.",
    "SERVES_GOAL": "A task is a step towards a goal.",
    "SCHEDULED": "A person has an event or appointment scheduled.",
    "ASSIGNED_TO": "A task is assigned to a person.",
    "INTERESTED_IN": "A person is interested in, or spends time on, a subject or activity.",
    "OWNS": "A person owns or has a specific thing or pet.",
    "ATTENDED": "A person attended, or will attend, an event.",
    "WORKS_ON": "A person works on a project.",
    "DUE_ON": "A task or project is due on a date (a new due date replaces the old one).",
    "USES": "A person or project uses a tool, service or language.",
    "DEPENDS_ON": "A task depends on (is blocked by) another task.",
    "PART_OF": "A task is part of a project.",
    "ATTENDS": "A person takes part in a meeting.",
    "SUPPORTS": "A source, data point, argument or piece of evidence supports a claim, viewpoint or argument.",
    "CONTRADICTS": "A source, data point or claim contradicts a claim.",
    "CITES": "A source cites another source.",
    "AUTHORED": "A person wrote or published a source.",
    "ABOUT": "A claim, source, viewpoint, opinion or argument is about a concept or issue.",
    "MEASURES": "A data point measures or quantifies a concept.",
    "USES_METHOD": "A source or study uses a method.",
    "HOLDS": "A person holds a viewpoint or opinion.",
    "ARGUES": "A person puts forward an argument.",
    "OPPOSES": "A person or argument opposes a viewpoint.",
    "AGREES_WITH": "A person agrees with another person.",
    "DISAGREES_WITH": "A person disagrees with another person.",
    "MEMBER_OF": "A person belongs to, studies at or works for an organization.",
    "LOCATED_IN": "An organization or place is located in a place.",
}


@dataclass(frozen=True)
class _Mode:
    entities: tuple[str, ...]
    edges: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]   # (edge, signatures)
    instructions: str
    gate: bool = False
    assistant_names: bool = False       # ModeSpec.assistant_names


_SPEAKERS = (
    "The speaker labelled 'User' is the person using the assistant and 'Assistant' is the AI: "
    "name them 'User' and 'Assistant'. In Assistant lines 'you' means User. ")

_IDENTITY = _Mode(
    entities=("Person", "Trait", "Preference", "Place", "Organization", "LifeEvent"),
    edges=(
        ("LIVES_IN", (("Person", "Place"),)),
        ("IS_FROM", (("Person", "Place"),)),
        ("WORKS_AT", (("Person", "Organization"),)),
        ("HAS_TRAIT", (("Person", "Trait"),)),
        ("LIKES", (("Person", "Preference"),)),
        ("DISLIKES", (("Person", "Preference"),)),
        ("KNOWS", (("Person", "Person"),)),
        ("EXPERIENCED", (("Person", "LifeEvent"),)),
    ),
    instructions=(
        "Memory mode Identity: build a lasting profile of User and the people in User's life. "
        "Extract who they are: names, where they live and come from, work, age, languages, "
        "skills, health and diet, likes and dislikes, relationships (family, friends, doctors, "
        "colleagues) and biographical events with their dates. State each fact about the "
        "person it describes. When User says something that replaces an earlier fact (moved, "
        "changed jobs, new dentist), state the new fact plainly so the old one can be "
        "superseded. Skip small talk, the assistant's explanations and general knowledge."))

_ASSISTANT = _Mode(
    entities=("Person", "Task", "Goal", "Instruction", "Event"),
    edges=(
        ("HAS_TASK", (("Person", "Task"),)),
        ("HAS_GOAL", (("Person", "Goal"),)),
        ("GAVE_INSTRUCTION", (("Person", "Instruction"),)),
        ("SERVES_GOAL", (("Task", "Goal"),)),
        ("SCHEDULED", (("Person", "Event"),)),
        ("ASSIGNED_TO", (("Task", "Person"),)),
    ),
    instructions=(
        "Memory mode Assistant: remember what User wants done and how User wants to be "
        "helped. Extract tasks and to-dos with their due dates and status (open, done, "
        "cancelled), longer-term goals, appointments, and standing instructions about how the "
        "assistant should answer (language, tone, length, format, things to always or never "
        "do). Phrase tasks as short imperative names ('renew passport'). When a task is "
        "finished or an instruction is withdrawn, say so explicitly. Skip chit-chat and the "
        "content of the assistant's answers unless User adopts it as a task or goal."))

_CHATBOT = _Mode(
    entities=("Person", "Place", "Organization", "Interest", "Thing", "Event"),
    edges=(
        ("INTERESTED_IN", (("Person", "Interest"),)),
        ("LIKES", (("Person", "Thing"), ("Person", "Interest"), ("Person", "Place"))),
        ("KNOWS", (("Person", "Person"),)),
        ("LIVES_IN", (("Person", "Place"),)),
        ("WORKS_AT", (("Person", "Organization"),)),
        ("OWNS", (("Person", "Thing"),)),
        ("ATTENDED", (("Person", "Event"),)),
    ),
    instructions=(
        "Memory mode Chatbot: keep a friendly, general memory of the conversation so later "
        "chats can pick up naturally. Extract the people, places, organizations, interests, "
        "hobbies, favourite things, pets, plans and events User talks about, and what User "
        "thinks of them. Prefer concrete, specific entities; skip greetings, filler and the "
        "assistant's generic explanations."))

_PRODUCTIVITY = _Mode(
    entities=("Person", "Project", "Task", "Deadline", "Tool", "Organization", "Meeting"),
    edges=(
        ("WORKS_ON", (("Person", "Project"),)),
        ("HAS_TASK", (("Project", "Task"), ("Person", "Task"))),
        ("ASSIGNED_TO", (("Task", "Person"),)),
        ("DUE_ON", (("Task", "Deadline"), ("Project", "Deadline"))),
        ("USES", (("Person", "Tool"), ("Project", "Tool"))),
        ("DEPENDS_ON", (("Task", "Task"),)),
        ("PART_OF", (("Task", "Project"),)),
        ("ATTENDS", (("Person", "Meeting"),)),
    ),
    instructions=(
        "Memory mode Productivity: track User's work. Extract projects, tasks, who owns "
        "them, their status, deadlines and due dates (as Deadline entities linked with "
        "DUE_ON), meetings, blockers, dependencies and the tools, languages and services "
        "used. Keep project and task names short and stable so later turns update the same "
        "entity; when a deadline moves or a task is done, state the new date or status "
        "plainly. Skip general advice the assistant gives unless User adopts it."))

_RESEARCH = _Mode(
    entities=("Concept", "Claim", "Source", "DataPoint", "Person", "Method"),
    edges=(
        ("SUPPORTS", (("Source", "Claim"), ("DataPoint", "Claim"))),
        ("CONTRADICTS", (("Source", "Claim"), ("DataPoint", "Claim"), ("Claim", "Claim"))),
        ("CITES", (("Source", "Source"),)),
        ("AUTHORED", (("Person", "Source"),)),
        ("ABOUT", (("Claim", "Concept"), ("Source", "Concept"))),
        ("MEASURES", (("DataPoint", "Concept"),)),
        ("USES_METHOD", (("Source", "Method"),)),
    ),
    instructions=(
        "Memory mode Research: record knowledge with its provenance. Extract the concepts "
        "discussed, specific claims, the sources they come from (papers, authors, datasets, "
        "sites, with year when given), data points with their exact values and units, and "
        "methods. Link every claim and data point to its source when one is named, and keep "
        "numbers exact. Mark claims that User or the assistant doubts or refutes with "
        "CONTRADICTS rather than dropping them. Skip chit-chat."),
    assistant_names=True)

_DISCOURSE = _Mode(
    entities=("Person", "Issue", "Viewpoint", "Argument", "Opinion", "Evidence"),
    edges=(
        ("HOLDS", (("Person", "Viewpoint"), ("Person", "Opinion"))),
        ("ARGUES", (("Person", "Argument"),)),
        ("SUPPORTS", (("Argument", "Viewpoint"), ("Evidence", "Argument"))),
        ("OPPOSES", (("Argument", "Viewpoint"), ("Person", "Viewpoint"))),
        ("ABOUT", (("Viewpoint", "Issue"), ("Opinion", "Issue"), ("Argument", "Issue"))),
        ("AGREES_WITH", (("Person", "Person"),)),
        ("DISAGREES_WITH", (("Person", "Person"),)),
    ),
    instructions=(
        "Memory mode Discourse: map the discussion. Extract the issues debated, the "
        "viewpoints and opinions each participant holds (attributed to that person), the "
        "arguments and evidence offered for and against them, and where participants agree "
        "or disagree. Phrase viewpoints and arguments as short neutral statements. When "
        "someone changes their mind, state the new position explicitly."),
    assistant_names=True)

_RESOLVE = _Mode(
    entities=("Person", "Place", "Organization", "Concept"),
    edges=(
        ("KNOWS", (("Person", "Person"),)),
        ("MEMBER_OF", (("Person", "Organization"),)),
        ("LIVES_IN", (("Person", "Place"),)),
        ("LOCATED_IN", (("Organization", "Place"), ("Place", "Place"))),
        ("ABOUT", (("Organization", "Concept"), ("Person", "Concept"))),
    ),
    instructions=(
        "Memory mode ResolveEntities: identify each person, place, organization and concept "
        "precisely and consistently. Before naming an entity, check the previous messages "
        "and known entities: use the fullest unambiguous name already known ('Bob Smith', not "
        "'Bob', when Bob Smith was mentioned before; 'Dr Okafor' for 'the dentist' once "
        "User said their dentist is Dr Okafor), resolve pronouns and nicknames, expand "
        "abbreviations once they are defined, and normalise spelling and capitalisation. "
        "Never merge two different entities that merely share a name; when a reference is "
        "ambiguous, qualify it (\"Paris, Texas\") instead of guessing."),
    assistant_names=True)

_MEMORY_GATE = _Mode(
    entities=_CHATBOT.entities, edges=_CHATBOT.edges, gate=True,
    instructions=(
        "Memory mode MemoryGate: this turn passed the memory gate as worth keeping. Extract "
        "only lasting information: facts about User and the people, places, plans, "
        "preferences and commitments User mentions. Skip transient details, small talk, "
        "questions without answers and the assistant's generic explanations."))

_CUSTOM_DEFAULT = (
    "Memory mode CustomPrompt (no Custom Analysis Prompt is set, so this default applies): "
    "extract the people, places, organizations, interests, things and events User mentions "
    "and the facts that connect them. Set your own instructions in Settings > Advanced > "
    "Custom Analysis Prompt.")

# The names are declared once, in config.schema (MemoryMode); the ontologies are in that order,
# and each one's instructions begin with its name, which the check below holds them to.
_MODES: dict[str, _Mode] = dict(zip(MEMORY_MODES, (
    _IDENTITY, _ASSISTANT, _CHATBOT, _PRODUCTIVITY, _RESEARCH, _DISCOURSE, _RESOLVE, _MEMORY_GATE,
    _Mode(entities=_CHATBOT.entities, edges=_CHATBOT.edges, instructions=_CUSTOM_DEFAULT),
), strict=True))
assert all(m.instructions.startswith(f"Memory mode {name}") for name, m in _MODES.items()), \
    "the modes' ontologies are out of the order of config.schema.MemoryMode"

MAX_CUSTOM_PROMPT_CHARS = 8000

# Gate prompt for an LLM MemoryGate decision (the local decision is engine/extract/gate.py).
GATE_PROMPT = (
    "Decide whether this chat turn is worth storing in long-term memory. Store it when it "
    "contains lasting information about User (identity, relationships, preferences, plans, "
    "commitments, tasks, decisions) or something User asked to remember. Skip greetings, "
    "thanks, small talk, one-off questions with generic answers, and turns with nothing "
    "about User. Answer with JSON: {\"store\": true|false, \"reason\": \"<few words>\"}.")


@lru_cache(maxsize=None)
def _model(name: str, doc: str) -> type[BaseModel]:
    """A field-less pydantic model named `name` whose docstring is `doc` (cached per pair)."""
    if not name.isidentifier():
        raise ValueError(f"type name {name!r} is not a valid identifier")
    return type(name, (BaseModel,), {"__doc__": doc, "__module__": __name__})


def _canonical(value: str, choices: tuple[str, ...], what: str) -> str:
    for choice in choices:
        if value.strip().lower() == choice.lower():
            return choice
    raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(choices)}")


def _tagging_instructions(emotions: bool, topics: bool) -> str:
    """What the type descriptions cannot say: that graphiti's own rules against feelings and
    abstract concepts do not apply to the tags, and that tags get no facts. How to name them,
    and the emotion sensitivity, are in the Emotion and Topic descriptions: this text goes
    into the extraction prompt of every turn, so it says nothing twice."""
    kinds = [k for k, on in (("Emotion", emotions), ("Topic", topics)) if on]
    if not kinds:
        return ""
    what = {"Emotion": "Emotion entities (the speaker's own emotions, though feelings are otherwise "
                       "not entities)",
            "Topic": "up to three Topic entities (what the message is about)"}
    return (f"Also extract {' and '.join(what[k] for k in kinds)}, with no facts for them: the "
            "message's link to a tag is the tag.")


def mode_spec(mode: str, custom_prompt: str = "", *, emotion_tagging: bool | None = None,
              topic_tagging: bool | None = None, emotion_sensitivity: str | None = None) -> ModeSpec:
    """The ontology and instructions graphiti uses for `mode` (one of config.schema.MEMORY_MODES).

    `custom_prompt` is used only in CustomPrompt mode; a tagging option not given has its
    default (config.schema). Raises ValueError for an unknown mode or sensitivity (names are
    matched case-insensitively).
    """
    if None in (emotion_tagging, topic_tagging, emotion_sensitivity):
        d = defaults()
        emotion_tagging = d["emotion_tagging"] if emotion_tagging is None else emotion_tagging
        topic_tagging = d["topic_tagging"] if topic_tagging is None else topic_tagging
        emotion_sensitivity = d["emotion_sensitivity"] if emotion_sensitivity is None else emotion_sensitivity
    name = _canonical(mode, tuple(_MODES), "memory mode")
    sensitivity = _canonical(emotion_sensitivity, SENSITIVITIES, "emotion sensitivity")
    spec = _MODES[name]

    entity_types = {t: _model(t, _ENTITY[t][0]) for t in spec.entities}
    cues = {t: _ENTITY[t][1] for t in spec.entities}
    if emotion_tagging:
        entity_types["Emotion"] = _model("Emotion", _emotion_doc(sensitivity))
        cues["Emotion"] = _TAG_CUES["Emotion"]
    if topic_tagging:
        entity_types["Topic"] = _model("Topic", _TOPIC_DOC)
        cues["Topic"] = _TAG_CUES["Topic"]

    edge_types = {e: _model(e, _EDGE[e]) for e, _ in spec.edges}
    edge_type_map: dict[tuple[str, str], list[str]] = {}
    for edge, signatures in spec.edges:
        for signature in signatures:
            edge_type_map.setdefault(signature, []).append(edge)
    # The typed signatures guide the LLM; the Entity/Entity entry keeps a fact of a known
    # type from being renamed RELATES_TO when the LLM typed an endpoint as plain Entity.
    edge_type_map[("Entity", "Entity")] = list(edge_types)

    if name == "CustomPrompt":
        prompt = (custom_prompt or "").strip()[:MAX_CUSTOM_PROMPT_CHARS]
        body = ("Memory mode CustomPrompt. The user's instructions for what to extract:\n"
                + prompt) if prompt else spec.instructions
    else:
        body = spec.instructions
    tagging = _tagging_instructions(emotion_tagging, topic_tagging)
    instructions = _SPEAKERS + body + ("\n" + tagging if tagging else "")

    return ModeSpec(name=name, entity_types=entity_types, edge_types=edge_types,
                    edge_type_map=edge_type_map, instructions=instructions, gate=spec.gate,
                    cues=cues, emotion_sensitivity=sensitivity, assistant_names=spec.assistant_names)
