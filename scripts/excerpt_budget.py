"""How a long turn's excerpt (engine/excerpts.py) was sized: on LongMemEval's dev split, each
evidence turn is cut for its question at several budgets, and two things are counted: how
much of the answer survives (the answer's words the whole turn holds that the excerpt still
holds, where it holds at least half of them; and, where the answer appears in the turn word
for word, whether the excerpt keeps it), and the tokens left (issue 18, docs/PERFORMANCE.md).

    python scripts/excerpt_budget.py ../shared/data/longmemeval/dev.json.gz [BUDGET ...]

The answer is read here, by the script, never by the engine: the excerpt sees the question
and the turn only. Abstention questions have no evidence turns and so do not count.
"""
from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the checkout's parent: `memoryplus`

from memoryplus.cli.bench_recall import load, to_question  # noqa: E402
from memoryplus.common.text import prompt_tokens  # noqa: E402
from memoryplus.engine import excerpts  # noqa: E402
from memoryplus.engine.embedders import LocalEmbedder  # noqa: E402
from memoryplus.engine.turn_index import tokens  # noqa: E402
from memoryplus.wire.records import Turn  # noqa: E402


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower())


def main(path: str, budgets: list[int]) -> None:
    embedder = LocalEmbedder()
    cases = []          # (question, turn body, answer words in the turn, literal answer or None)
    for raw in load(path):
        q, answer = to_question(raw), str(raw.get("answer", ""))
        words = set(tokens(answer))
        for t in q.turns:
            if not t.evidence:
                continue
            body = Turn(id=t.id, user=t.user, assistant=t.assistant, time=t.time).body()
            held = words & set(tokens(body))
            if len(held) < max(1, len(words) / 2):     # the turn holds little of the answer's words
                held = set()
            literal = _flat(answer) if 2 < len(answer) < 40 and _flat(answer) in _flat(body) else None
            cases.append((q.question, body, held, literal))
    whole = statistics.mean(prompt_tokens(b) for _, b, _, _ in cases)
    print(f"{len(cases)} evidence turns, {whole:.0f} tokens on average")
    print("budget  tokens  answer words kept  literal answers kept")
    for budget in budgets:
        shown = [excerpts.excerpt(b, q, embedder, budget) for q, b, _, _ in cases]
        kept = [len(h & set(tokens(s))) / len(h) for (_, _, h, _), s in zip(cases, shown) if h]
        literal = [lit in _flat(s) for (_, _, _, lit), s in zip(cases, shown) if lit]
        print(f"{budget:6d}  {statistics.mean(map(prompt_tokens, shown)):6.0f}  "
              f"{statistics.mean(kept):17.3f}  {statistics.mean(literal):.3f} of {len(literal)}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], [int(b) for b in sys.argv[2:]] or [150, 200, 250, 300, 400])
