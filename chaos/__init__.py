"""The fault-injection suite: ``python -m chaos`` (``make chaos``), ``--short`` in CI.

Scenarios, each counting what it lost instead of assuming nothing was:

- ``worker_kills``: ``python worker.py`` killed with SIGKILL at random points under planned tasks
  with branches and questions;
- ``server_restarts``: the dev server stopped and started again on its SQLite file mid-task;
- ``provider_faults``: every provider failure SPEC §1 names, through the real SDK clients;
- ``bad_input``: generated answers, side questions and control-tool arguments (hypothesis);
- ``audit``: no provider key in any history the suite produced, and every one replays.
"""

from chaos._crashes import (
    KILL_FULL,
    KILL_SHORT,
    RESTART_FULL,
    RESTART_SHORT,
    server_restarts,
    worker_kills,
)
from chaos._report import Outcome
from chaos._stack import Stack

__all__ = [
    "KILL_FULL",
    "KILL_SHORT",
    "RESTART_FULL",
    "RESTART_SHORT",
    "Outcome",
    "Stack",
    "server_restarts",
    "worker_kills",
]
