"""MCP servers: their configuration (``config``: ``ERRANDS_MCP_SERVERS``, tool names, results)
and a client for one server (``client``: list and call tools through the official SDK; imported
only where a call is made, since the SDK costs a second to import)."""
