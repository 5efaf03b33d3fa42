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

The modules, in the order a turn goes through them: text (blocks, contractions), lexicons
(the vocabulary and verb table), phrases (names, noun phrases), dates, clauses, rules and
verbs (the clause rules), collector (the result), pipeline (all of it for one body); beside
it gate (the memory gate), entities (resolving a name to a known entity) and query (reading
a search query).
"""
from __future__ import annotations

from .collector import MAX_ENTITIES, MAX_FACTS, LocalEntity, LocalExtraction, LocalFact
from .entities import canonical_entity
from .gate import gate_decision, is_low_value, word_count
from .pipeline import extract
from .query import (as_the_user, asks_about_assistant, asks_about_past, asks_for_several, days_ago,
                    family_words, role_references)
from .text import MAX_CHARS

__all__ = ["MAX_CHARS", "MAX_ENTITIES", "MAX_FACTS", "LocalEntity", "LocalExtraction",
           "LocalFact", "as_the_user", "asks_about_assistant", "asks_about_past", "asks_for_several",
           "canonical_entity", "days_ago", "extract",
           "family_words", "gate_decision", "is_low_value", "role_references", "word_count"]
