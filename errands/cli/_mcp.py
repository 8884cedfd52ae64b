"""``errands mcp``: errands as an MCP server over stdio, for Claude Code, IDEs and desktop
assistants (``claude mcp add errands -- errands mcp``; docs/mcp-server.md).

It acts as the operator, as every other command of the CLI does (whoever runs it can reach
Temporal and the store). It reaches Temporal as the other commands do (flags, ``TEMPORAL_*``, a
``temporal.toml`` profile, a running ``errands dev``), and with nothing configured or running it
starts the embedded dev server and a worker for as long as it runs, as ``errands run`` does.
stdout carries the protocol alone: every note goes to stderr.
"""

from __future__ import annotations

import argparse

from errands.cli._connection import add_connection_flags, connection_flags
from errands.cli._stack import stack
from errands.settings import load_settings


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``errands mcp`` on the CLI's subcommands."""
    parsed = sub.add_parser(
        "mcp",
        help="serve errands as an MCP server over stdio (claude mcp add errands -- errands mcp)",
        description=(
            "errands as an MCP server over stdio, for Claude Code, IDEs and desktop assistants "
            "(claude mcp add errands -- errands mcp; docs/mcp-server.md). It acts as the "
            "operator, as every command does; with nothing configured it starts the embedded "
            "dev server and a worker. stdout carries the protocol alone; notes go to stderr."
        ),
    )
    add_connection_flags(parsed)
    parsed.set_defaults(handler=serve_mcp, stops_by_signal=True)


async def serve_mcp(args: argparse.Namespace) -> int:
    from errands.protocols.mcp import serve_stdio

    settings = load_settings(**connection_flags(args))
    async with stack(settings, need_worker_here=True) as client:
        await serve_stdio(client)
    return 0


if __name__ == "__main__":  # `python -m errands.cli._mcp`, until `errands mcp` is wired in
    import asyncio
    import sys

    parser = argparse.ArgumentParser(prog="errands")
    add_command(parser.add_subparsers(required=True))
    raise SystemExit(asyncio.run(serve_mcp(parser.parse_args(["mcp", *sys.argv[1:]]))))
