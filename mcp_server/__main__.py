"""`python -m memoryplus.mcp_server`: the MCP server where there is no `memoryplus` command
(PyGPT's add-on route: PyGPT's own Python runs it)."""
import sys

from memoryplus.mcp_server.main import main

sys.exit(main())
