"""The offline demo's MCP server: an almanac of a few cities, over stdio with the ``mcp`` SDK.

``make demo`` gives it to errands through ``ERRANDS_MCP_SERVERS``::

    {"almanac": {"command": ["python", "-m", "errands.adapters.demo_tools"]}}

and the demo model's ``facts`` branch calls ``mcp__almanac__lookup``, so the demo shows a branch
calling a tool, with no key and no network.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

ENTRIES = {
    "lisbon": (
        "Lisbon, capital of Portugal: mild winters, hot dry summers; seven hills, so good shoes. "
        "Tram 28 crosses the old town; a 24-hour transit pass costs about 7 EUR. Free on Sunday "
        "mornings for residents only: most museums charge 5-15 EUR. Pasteis de nata cost about "
        "1.50 EUR; a dinner for two in a tasca 30-40 EUR."
    ),
    "porto": (
        "Porto, on the Douro: port-wine cellars in Vila Nova de Gaia, the Ribeira waterfront, "
        "the Livraria Lello (tickets about 10 EUR). Rainier than Lisbon outside summer."
    ),
    "paris": (
        "Paris: the Louvre is closed on Tuesdays; a Navigo Easy card with a day ticket costs "
        "about 8.65 EUR. Book popular museums ahead."
    ),
}


def lookup(topic: str) -> str:
    """What the almanac says about the places ``topic`` names."""
    found = [text for place, text in ENTRIES.items() if place in topic.lower()]
    if not found:
        known = ", ".join(sorted(ENTRIES))
        return f"The almanac has no entry for that; it knows {known}."
    return "\n".join(found)


def build_server() -> MCPServer:
    server = MCPServer("almanac", log_level="WARNING")
    server.tool(description="Look up practical facts about a city: climate, transport, prices.")(
        lookup
    )
    return server


if __name__ == "__main__":
    build_server().run()
