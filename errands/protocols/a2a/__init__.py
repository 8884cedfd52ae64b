"""A2A 1.0 on the gateway (SPEC §12; docs/a2a.md): errands' tasks as A2A tasks, with the
official ``a2a-sdk`` (JSON-RPC and HTTP+JSON bindings) and errands' own request handler over
``errands.Client``. ``contextId`` is the session, the task id errands' task id; streams and
``SubscribeToTask`` read the task's event log, so any gateway process serves any task and a
resumed stream (``Last-Event-ID``) loses nothing."""

from errands.protocols.a2a._card import RESUME_EXTENSION, agent_card
from errands.protocols.a2a._handler import PRINCIPAL, WAIT_SECONDS, ErrandsRequestHandler
from errands.protocols.a2a._mount import mount_a2a

__all__ = [
    "PRINCIPAL",
    "RESUME_EXTENSION",
    "WAIT_SECONDS",
    "ErrandsRequestHandler",
    "agent_card",
    "mount_a2a",
]
