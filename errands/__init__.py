"""errands: durable, delegated LLM tasks on Temporal."""

__version__ = "0.1.0"
