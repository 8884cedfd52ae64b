"""The notes MCP server (tests/mcp_notes_server.py) as the tests run it: over stdio, or as a
process of its own on Streamable HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from errands.devserver import port_open
from errands.mcp import McpServerConfig

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Notes:
    """A notes server to test against: how to reach it and the directory it keeps notes in."""

    config: McpServerConfig
    dir: Path

    def writes(self, name: str) -> list[dict[str, object]]:
        """The records of writes.jsonl for the note ``name``."""
        path = self.dir / "writes.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [record for line in lines if (record := json.loads(line))["name"] == name]


def notes_command(notes_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.mcp_notes_server", "--dir", str(notes_dir), *extra]


def start_listening(command: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` and wait until it accepts connections on ``port``."""
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not port_open("127.0.0.1", port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            pytest.fail(f"{command} did not listen on {port}:\n{log.read_text()}")
        time.sleep(0.1)
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
