"""Live progress for many streams: one ``TaskWatch`` follows a task (``TaskHandle.progress``,
which reads and never writes) however many clients stream it, and stops when the last one
leaves or the task ends. A late client gets the backlog first, then the live events."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from errands.client import Client
from errands.errors import ErrandsError, TaskNotFound
from errands.progress import ProgressEvent

log = logging.getLogger("errands.gateway")


class TaskWatch:
    """The one follower of a task, fanning its events out to every subscriber."""

    def __init__(
        self,
        task_id: str,
        client: Client,
        interval: float,
        on_done: Callable[[TaskWatch], None],
    ) -> None:
        self.task_id = task_id
        self.log: list[ProgressEvent] = []
        self.subscribers: set[asyncio.Queue[ProgressEvent | None]] = set()
        self.finished = False
        self.joining = 0
        """Subscribers waiting for the first read."""
        self.first_tick = asyncio.Event()
        """Set once the first read is in the log (or the watch has ended)."""
        self._client = client
        self._interval = interval
        self._on_done = on_done
        self._task = asyncio.create_task(self._run(), name=f"progress {task_id}")

    async def _run(self) -> None:
        try:
            # A read's events arrive without a pause between them, so by the time a waiting
            # subscriber runs, the whole first read is in the log.
            async for event in self._client.task(self.task_id).progress(interval=self._interval):
                if event.type == "unavailable":
                    log.warning("progress of %s: %s (retrying)", self.task_id, event.data["detail"])
                    continue
                self._publish(event)
                self.first_tick.set()
        except TaskNotFound as error:
            self._publish(ProgressEvent("gone", "error", {"detail": error.message}))
        except ErrandsError as error:
            log.warning("progress of %s stopped: %s", self.task_id, error.message)
            self._publish(ProgressEvent("stopped", "error", {"detail": error.message}))
        finally:
            self.finished = True
            self.first_tick.set()
            for queue in self.subscribers:
                queue.put_nowait(None)
            self._on_done(self)

    def _publish(self, event: ProgressEvent) -> None:
        self.log.append(event)
        for queue in self.subscribers:
            queue.put_nowait(event)

    def stop(self) -> None:
        self._task.cancel()

    async def wait(self) -> None:
        await asyncio.gather(self._task, return_exceptions=True)


class ProgressHub:
    """One ``TaskWatch`` per task, shared by every stream of it."""

    def __init__(self, client: Client, interval: float = 0.25) -> None:
        self._client = client
        self._interval = interval
        self._watches: dict[str, TaskWatch] = {}

    def watch_of(self, task_id: str) -> TaskWatch | None:
        """The task's follower while one runs (tests use it to see that streams share it)."""
        return self._watches.get(task_id)

    @asynccontextmanager
    async def subscribe(
        self, task_id: str, after: str | None = None
    ) -> AsyncIterator[asyncio.Queue[ProgressEvent | None]]:
        """A queue with the backlog (from just past the event ``after``, when it is in it), then
        the live events; ``None`` marks the end."""
        watch = self._watches.get(task_id)
        if watch is None:
            watch = TaskWatch(task_id, self._client, self._interval, self._forget)
            self._watches[task_id] = watch
        queue: asyncio.Queue[ProgressEvent | None] = asyncio.Queue()
        # A new watch first reads the task once, so ``after`` is found in what exists already.
        watch.joining += 1
        try:
            await watch.first_tick.wait()
        finally:
            watch.joining -= 1
            if not watch.first_tick.is_set():  # the client left before the first read
                self._release(watch)
        # No await between copying the backlog and subscribing: no event falls in between.
        keys = [event.key for event in watch.log]
        start = keys.index(after) + 1 if after in keys else 0
        for event in watch.log[start:]:
            queue.put_nowait(event)
        if watch.finished:
            queue.put_nowait(None)
        else:
            watch.subscribers.add(queue)
        try:
            yield queue
        finally:
            watch.subscribers.discard(queue)
            self._release(watch)

    def _release(self, watch: TaskWatch) -> None:
        """Stop a follower nobody follows any more."""
        if not watch.subscribers and not watch.joining and not watch.finished:
            watch.stop()
            self._forget(watch)

    def _forget(self, watch: TaskWatch) -> None:
        if self._watches.get(watch.task_id) is watch:
            del self._watches[watch.task_id]

    async def aclose(self) -> None:
        watches = list(self._watches.values())
        for watch in watches:
            watch.stop()
        for watch in watches:
            await watch.wait()
