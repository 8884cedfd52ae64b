"""Adapters: errands' connections to the world outside, each wrapping one thing.

Model providers (``providers``) and the router that picks one per model name (``routing``), the
session store (``store``), MCP servers (``mcp``), the scripted model server of tests and the demo
(``scripted``, ``demo``, ``demo_tools``), the embedded Temporal dev server (``devserver``) and
logs, metrics and traces (``telemetry``). They import the contracts and the agent's rules, never
a frontend, the workflows or the activities.
"""
