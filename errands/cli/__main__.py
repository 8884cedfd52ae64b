"""``python -m errands.cli``: the ``errands`` command."""

from errands.cli import entry

entry()
