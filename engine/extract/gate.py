"""The memory gate without an LLM, and the low-value word count."""
from __future__ import annotations

import re

from memoryplus.common.text import COUNTED_WORD
from memoryplus.engine.modes import mode_spec

from .pipeline import _extract_blocks
from .text import _LABEL, _bounded_blocks



def word_count(body: str) -> int:
    """Words in the turn; role labels ("User:", "Assistant:") are not words."""
    return len(COUNTED_WORD.findall(_LABEL.sub(" ", body or "")))


def is_low_value(body: str, threshold: int) -> bool:
    """True when the turn has fewer words than `threshold` (the Low-Value Threshold)."""
    return word_count(body) < threshold


_REMEMBER = re.compile(
    r"\b(remember (this|that|it)|please remember|don'?t forget|do not forget|note (that|this)|"
    r"make a note|keep in mind|for future reference|for the record|/remember_this|"
    r"save (this|that)|remember:)", re.I)
_DONT_STORE = re.compile(
    r"\b(don'?t|do not|never) (remember|store|save|record|memori[sz]e)\b|\boff the record\b|"
    r"\bforget (this|that|what i (just )?said)\b|/forget_that", re.I)
_SMALL_TALK = set("""
hi hello hey hiya yo thanks thank you thx ty ok okay k kk cool nice great good awesome sure
yes yeah yep yup no nope nah bye goodbye cya see later lol haha hehe wow oh ah hmm alright
right got it perfect fine np welcome morning evening night gn gm sounds cheers please
""".split())
_GATE_SPEC = mode_spec("Chatbot", emotion_tagging=False, topic_tagging=False)


def gate_decision(body: str) -> tuple[bool | None, str]:
    """MemoryGate without an LLM: (True, why) keep, (False, why) skip, (None, why) unsure."""
    blocks = _bounded_blocks(body or "")
    user = "\n".join(t for s, t in blocks if s == "User")
    if _DONT_STORE.search(user):
        return False, "asked not to remember"
    if _REMEMBER.search(user):
        return True, "asked to remember"
    if not any(COUNTED_WORD.search(t) for _, t in blocks):
        return False, "empty turn"
    found = _extract_blocks(blocks, _GATE_SPEC)
    personal = [f for f in found.facts if "User" in (f.subject, f.object)]
    if personal:
        return True, f"personal fact: {personal[0].fact}"
    if found.facts:
        return True, f"fact: {found.facts[0].fact}"
    user_words = [w.lower() for w in COUNTED_WORD.findall(user)]
    if not user_words or (len(user_words) <= 6 and all(w in _SMALL_TALK for w in user_words)):
        return False, "small talk"
    first_person = {"i", "my", "me", "mine", "we", "our", "us", "i'm", "i've", "i'd", "i'll"}
    if not any(w in first_person for w in user_words) and user.strip().endswith("?"):
        return None, "a question with nothing about the user"
    return None, "no clear signal"
