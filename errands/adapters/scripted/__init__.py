"""A scripted model server: real HTTP on loopback, speaking OpenAI Chat Completions and Anthropic
Messages, plain or streamed, so tests and the offline ``demo`` model drive the real SDK clients.

Each request is answered by the next step scripted for its model, else by the responder, else it
is recorded as unexpected and refused with HTTP 400 (non-retryable for our classifier, so a
missing script fails the test instead of looping through retries).

Two behaviours of real servers can be switched on: a model whose server refuses
``tool_choice: "required"`` (``refuse_required_tool_choice``), and a prompt cache
(``prompt_cache``) that reports, deterministically, the prefixes it has seen before as cache reads
(and, on Anthropic, the prefixes up to a ``cache_control`` breakpoint it had not seen as writes).

A request with ``"stream": true`` answered by a ``Reply`` gets the server-sent events each API
sends, which the SDKs accumulate into the same result as the plain response: text and tool
arguments go out in pieces of ``chunk_chars``, ``chunk_delay`` apart, and ``fail_after`` pieces
can end the stream with the API's mid-stream error. ``Fail`` and ``Reset`` answer before any
stream starts, as for a plain request.

The server runs its own event loop in a daemon thread, so it works the same from sync test code
and from inside another asyncio loop; delays are ``asyncio.sleep`` and never block other requests.
A step with ``hold=Gate()`` waits until the test calls ``gate.release()`` (``await
gate.reached()`` first, to know the call is in): tests decide an ordering with a gate, never with
a delay.

The package keeps the script's data (``_steps``), what goes on the wire for each API (``_wire``)
and the server with its prompt cache (``_server``) apart; import everything from here.
"""

from errands.adapters.scripted._server import ScriptedModelServer
from errands.adapters.scripted._steps import (
    CACHE_LOOKBACK,
    REQUIRED_REFUSAL,
    Api,
    Call,
    Fail,
    Gate,
    RecordedRequest,
    Reply,
    Reset,
    Responder,
    Step,
)

__all__ = [
    "CACHE_LOOKBACK",
    "REQUIRED_REFUSAL",
    "Api",
    "Call",
    "Fail",
    "Gate",
    "RecordedRequest",
    "Reply",
    "Reset",
    "Responder",
    "ScriptedModelServer",
    "Step",
]
