"""Contracts: every model that crosses a Temporal payload or the session store.

The lowest layer of errands: these modules import only pydantic, ``temporalio.common`` and
``errands.errors``, never a rule or an adapter, so a payload's shape can be read (and changed)
without loading the code that acts on it. Payloads serialise field by field, so a model may move
between these modules without breaking a recorded history.

- ``messages``: model messages, requests and responses, usage, stored rows
- ``workflows``: inputs, outputs, queries and updates of the workflows
- ``activities``: inputs and outputs of the activities
- ``asking``, ``approvals``, ``subtasks``: the payloads of questions, approvals and subtask types
- ``events``: the event log's schema; ``ids``: every deterministic id; ``search``: search
  attributes; ``limits``: the timeouts and sizes several layers agree on; ``versions``: the
  names of a worker deployment version
"""
