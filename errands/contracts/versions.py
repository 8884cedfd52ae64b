"""The names of a worker deployment version, as the settings accept them and ``errands upgrade``
puts them in a visibility query (nothing in either needs escaping)."""

from __future__ import annotations

import re

DEPLOYMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
"""A deployment name: no '.', which Temporal reads as the end of the name in a version
(``NAME.BUILD_ID``)."""
BUILD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A build id: letters, digits, '.', '_' or '-' (no ':' or '/')."""
