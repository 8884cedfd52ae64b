"""Reading a history as anyone who can reach the server reads it: ``temporal workflow show
--output json`` prints each payload's data (and metadata) in base64, which hides plain text as
well as ciphertext, so a search for a user's words must look through the decoded strings."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any


def readable(shown: str) -> str:
    """Everything in ``shown`` (a history as JSON) a reader can read: the JSON text, and each
    base64 string in it decoded (payloads' data and metadata among them)."""
    parts = [shown]

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            try:
                parts.append(base64.b64decode(value, validate=True).decode("utf-8", "replace"))
            except (binascii.Error, ValueError):
                pass

    walk(json.loads(shown))
    return "\n".join(parts)
