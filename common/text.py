"""The text pieces every side shares: tokenizers, stop words, the stemmer, the sentence
splitter and the hashed character trigrams. Standard library only: the bench's BM25
baseline, the plugin's prompt budget and the engine all import it.

Tokenizers differ on purpose, each is named for what it counts:

* `keyword_tokens`: BM25's terms, as LongMemEval's README defines the baseline (lower-cased
  runs of `[a-z0-9]` minus `KEYWORD_STOP_WORDS`); the engine's turn index ranks the same words.
* `PROMPT_TOKEN`: a word or one punctuation mark, the unit of a prompt-token budget.
* `WORD`: runs of `\\w`, for embedding features and query words.
* `COUNTED_WORD`: words with inner apostrophes/hyphens kept ("don't" is one word), for word counts.
* `LEXICON_TOKEN`: words (with "+"/"#" suffixes: c++, c#) and single symbols, for the
  emotion/topic lexicons.
* `EXTRACTION_TOKEN`: also URLs, e-mail addresses and numbers with units ("3rd", "5pm", "10%")
  as one token, for the local extraction's grammar.
"""
from __future__ import annotations

import hashlib
import re

KEYWORD_STOP_WORDS = frozenset(
    "a an the and or of to in on at for is are was were be been it this that with as by i you he "
    "she we they my your his her our their me him them do did does have has had not no so but if "
    "from what when where who how which".split())
# What a forget's strong match ignores: a memory matches the words the user named.
MATCH_STOP_WORDS = frozenset("""the and for that this with you your are was were have has had not but
what when where which who how why about from into they them their there here then than
just also very can could would should will shall may might does did done its it's i'm
my me mine our ours his her hers him she he we us of to in on at by an a is be been it
""".split())

# The search cache's filler: closed-class words that do not choose what a query is about
# (plugin/cache.py's docstring).
QUERY_FILLER_WORDS = frozenset("""
a an the
is are was were be been being am do does did have has had having
can could will would shall should may might must
what which who whom whose when where why how
whats whos wheres whens whys hows thats theres heres lets
please pls thanks thank hey hello hi ok okay um uh er hmm well so
of about
""".split())

_KEYWORD = re.compile(r"[a-z0-9]+")

PROMPT_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
WORD = re.compile(r"\w+", re.UNICODE)
COUNTED_WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")
LEXICON_TOKEN = re.compile(r"[^\W_](?:[\w'’\-]*[^\W_])?[+#]*|[^\w\s]")


def prompt_tokens(text: str) -> int:
    """The prompt tokens of `text` (PROMPT_TOKEN): what a memory costs a token budget."""
    return len(PROMPT_TOKEN.findall(text))


def truncate_tokens(text: str, max_tokens: int) -> str:
    """Cut text to about `max_tokens` tokens (words and punctuation marks)."""
    count = 0
    for m in PROMPT_TOKEN.finditer(text):
        count += 1
        if count > max_tokens:
            return text[:m.start()].rstrip() + " …"
    return text
EXTRACTION_TOKEN = re.compile(
    r"https?://\S+"
    r"|[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+"
    r"|\d+(?:[.,:/\-]\d+)*(?:st|nd|rd|th|%|k|am|pm)?\b"
    r"|[^\W\d_](?:[\w'\-]*\w)?[+#]*"
    r"|[^\w\s]")


def keyword_tokens(text: str) -> list[str]:
    """BM25's terms of `text` (the baseline's definition, above)."""
    return [w for w in _KEYWORD.findall(text.lower()) if w not in KEYWORD_STOP_WORDS]


# ── sentences ─────────────────────────────────────────────────────────────────────────
_SENT_BOUNDARY = re.compile(r"[.!?…]+[\"')\]]*(?=\s|$)|\n+")
# a dot after these (or after a single letter, an initial) ends no sentence
ABBREVIATIONS = frozenset({
    "dr", "mr", "mrs", "ms", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "inc", "ltd",
    "co", "no", "approx", "dept", "mt", "ave", "rd", "fig", "u.s", "eg", "ie", "cf", "al"})


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`, cut at . ! ? … (with closing quotes/brackets) and at line breaks,
    not after an abbreviation ("Dr.", "e.g.") or an initial."""
    out, start = [], 0
    for m in _SENT_BOUNDARY.finditer(text):
        if m.group(0)[0] == ".":
            before = text[start:m.start()].rsplit(None, 1)
            word = before[-1].lower() if before else ""
            if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
        piece = text[start:m.end()].strip()
        if piece:
            out.append(piece)
        start = m.end()
    rest = text[start:].strip()
    if rest:
        out.append(rest)
    return out


# ── stemming ──────────────────────────────────────────────────────────────────────────
def stem(word: str) -> str:
    """A light plural stemmer: "stories" -> "story", "dentists" -> "dentist"; "class", "bus",
    "analysis" unchanged. For matching words, not for showing them."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


# ── hashed character trigrams ─────────────────────────────────────────────────────────
def char_trigrams(word: str) -> list[str]:
    """The character trigrams of `word` padded with '#': "cat" -> #ca, cat, at#."""
    padded = f"#{word}#"
    return [padded[i:i + 3] for i in range(len(padded) - 2)]


def feature_hash(feature: str) -> int:
    """A stable 64-bit hash of a feature (the same on every run and machine)."""
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "little")
