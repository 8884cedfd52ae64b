"""A tiny blocking connection pool shared by both store backends.

Activities call the store from several worker threads at once; a DB-API connection must not be
used by two threads at the same time, so each call borrows one connection for its duration. The
pool is deliberately small and lazy: connections are opened on demand up to ``size`` and kept.
A thread that holds a connection of its own (``holding``: a transaction that spans several
calls) is given that one instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

C = TypeVar("C")


class Pool(Generic[C]):
    def __init__(
        self,
        connect: Callable[[], C],
        *,
        size: int,
        reusable: Callable[[C], bool],
        close: Callable[[C], None],
        name: str,
    ) -> None:
        self._connect = connect
        self._reusable = reusable
        self._close_conn = close
        self._name = name
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[C] = []
        self._closed = False
        self._held = threading.local()

    @contextmanager
    def connection(self) -> Iterator[C]:
        held = self.held()
        if held is not None:
            yield held
            return
        self._slots.acquire()
        try:
            conn = self._take()
            try:
                yield conn
            finally:
                self._give_back(conn)
        finally:
            self._slots.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def held(self) -> C | None:
        """The connection this thread holds (``holding``), if any."""
        return getattr(self._held, "conn", None)

    @contextmanager
    def holding(self, conn: C) -> Iterator[None]:
        """Inside the block, every ``connection`` this thread asks for is ``conn``."""
        before, self._held.conn = self.held(), conn
        try:
            yield
        finally:
            self._held.conn = before

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            self._close_conn(conn)

    def _take(self) -> C:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the session store {self._name} is closed; open a new one")
            while self._idle:
                conn = self._idle.pop()
                if self._reusable(conn):
                    return conn
                # A connection the server dropped while idle: discard it rather than fail a call.
                self._close_conn(conn)
        return self._connect()

    def _give_back(self, conn: C) -> None:
        keep = self._reusable(conn)
        with self._lock:
            if keep and not self._closed:
                self._idle.append(conn)
                return
        self._close_conn(conn)
