"""The benchmarks' scripted model server as a process of its own: ``python -m bench._model_server``
prints its OpenAI base URL once it listens and serves until its stdin closes (the stack's end)
or it is terminated.

A provider is never in the worker's process. On a thread of the benchmark's process the server's
own work (parsing requests, writing the streamed answers) held the GIL the workers need, and was
charged to errands' model calls while the floors, which call no model, paid nothing for it.
"""

from __future__ import annotations

import sys

from bench._model import responder
from errands.adapters.scripted import ScriptedModelServer


def main() -> None:
    server = ScriptedModelServer(responder=responder, keep_requests=0).start()
    print(server.openai_base_url, flush=True)
    try:
        sys.stdin.read()  # until the stack closes our stdin, or ends us
    finally:
        server.stop()


if __name__ == "__main__":
    main()
