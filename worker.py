"""The errands worker process: ``python worker.py`` (or ``errands worker``) polls
``settings.task_queue`` on ``TEMPORAL_ADDRESS`` until SIGTERM. Workers are built in
``errands.workers``."""

from __future__ import annotations

import asyncio

from errands.errors import ErrandsError
from errands.settings import load_settings
from errands.workers import run_worker

if __name__ == "__main__":
    try:
        asyncio.run(run_worker(load_settings()))
    except ErrandsError as error:
        raise SystemExit(f"errands worker: {error}") from None
