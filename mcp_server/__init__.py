"""`memoryplus mcp`: the memory as tools and resources of the Model Context Protocol.

An interface like the CLI: it talks only to the service (service.open_service(share=True)),
so it joins the worker PyGPT runs for the data directory, or starts the one PyGPT then joins.

    main.py     the command line (stdio by default, Streamable HTTP behind --http)
    tools.py    the tools (search, remember, forget, timeline, list_banks, stats) and the
                banks as resources, with their input checks
    http.py     the HTTP transport: 127.0.0.1 only, a bearer token, DNS-rebinding protection
"""
