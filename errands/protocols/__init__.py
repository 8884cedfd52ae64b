"""The protocols other clients speak, served over errands' tasks (SPEC §12): A2A on the
gateway (``errands.protocols.a2a``) and an MCP server (``errands.protocols.mcp``: ``errands mcp``
over stdio, ``/mcp`` on the gateway). Each request acts as a principal through ``errands.Client``,
like every other frontend; nothing here holds a task's state of its own."""
