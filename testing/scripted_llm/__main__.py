"""``python -m memoryplus.testing.scripted_llm``: the scripted LLM until Ctrl-C."""

import sys

from memoryplus.testing.scripted_llm.server import main

sys.exit(main())
