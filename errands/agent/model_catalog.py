"""The model catalog: what errands knows about each model family, as data.

Entries match ``provider:model`` with shell-style patterns (``|`` between alternatives). The
first entry that matches wins, so a model comes before its family and each provider's default
comes last. An entry says which sampling parameters the family accepts, which output limit to
send, whether it reports reasoning tokens, its context window and longest output, and what it
costs when errands knows (``errands.agent.pricing`` reads prices from here and nowhere else).

``ERRANDS_MODELS`` changes entries or describes models errands does not know, field by field,
on top of the entry that matches::

    {"openai:my-local": {"context_window": 16000, "max_output": 2048, "temperature": false}}

Pure data and pure functions: workflows import this module (through ``errands.agent.pricing``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from errands.contracts.messages import ModelPrice

OutputLimit = Literal["max_completion_tokens", "max_tokens", "both"]
"""Which Chat Completions field carries the output limit."""


class ModelInfo(BaseModel):
    """What one model family accepts and reports. Every field has a conservative default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: bool = True
    """Accepts a sampling temperature. OpenAI's reasoning families refuse one with 400."""
    output_limit: OutputLimit | None = None
    """Which field carries the output limit on the Chat Completions wire. None: decided by the
    server, ``max_completion_tokens`` on OpenAI's own API and both elsewhere (llama.cpp and
    llama-cpp-python read only ``max_tokens``)."""
    reasoning_tokens: bool = False
    """Reports the output tokens it spent reasoning (the ledger's ``reasoning_tokens``)."""
    prompt_cache: bool = True
    """Anthropic wire: send ``cache_control`` breakpoints (off for servers that refuse them)."""
    context_window: int = Field(default=32_000, ge=1)
    """Tokens of input and output together that one request may hold."""
    max_output: int = Field(default=4_096, ge=1)
    """Most output tokens one call may ask for; a request asking for more is capped."""


@dataclass(frozen=True)
class ModelFamily:
    match: str
    """``provider:model`` patterns, ``|`` between alternatives."""
    info: ModelInfo
    price: ModelPrice | None = None


def _price(
    input: float, output: float, cached: float, cache_write: float | None = None
) -> ModelPrice:
    return ModelPrice(input=input, output=output, cached=cached, cache_write=cache_write)


_REASONING = ModelInfo(
    temperature=False,
    output_limit="max_completion_tokens",
    reasoning_tokens=True,
    context_window=200_000,
    max_output=100_000,
)
_GPT5 = _REASONING.model_copy(update={"context_window": 400_000, "max_output": 128_000})
_GPT41 = ModelInfo(context_window=1_047_576, max_output=32_768)
_GPT4O = ModelInfo(context_window=128_000, max_output=16_384)
_CLAUDE_4 = ModelInfo(context_window=200_000, max_output=64_000)
_CLAUDE_OPUS_4 = ModelInfo(context_window=200_000, max_output=32_000)

# A model's own entry is its bare name plus its dated snapshots (``-2025-04-14``, ``-20250929``).
FAMILIES: tuple[ModelFamily, ...] = (
    ModelFamily("demo", ModelInfo(), _price(0, 0, 0)),
    # OpenAI's reasoning families: no temperature, never max_tokens, reasoning tokens reported.
    ModelFamily("openai:gpt-5|openai:gpt-5-2*", _GPT5, _price(1.25, 10.0, 0.125)),
    ModelFamily("openai:gpt-5-mini|openai:gpt-5-mini-2*", _GPT5, _price(0.25, 2.0, 0.025)),
    ModelFamily("openai:gpt-5-nano|openai:gpt-5-nano-2*", _GPT5, _price(0.05, 0.4, 0.005)),
    ModelFamily("openai:gpt-5*", _GPT5),
    ModelFamily("openai:o3|openai:o3-2*", _REASONING, _price(2.0, 8.0, 0.5)),
    ModelFamily("openai:o4-mini|openai:o4-mini-2*", _REASONING, _price(1.1, 4.4, 0.275)),
    ModelFamily(
        "openai:o1-mini*|openai:o1-preview*",
        _REASONING.model_copy(update={"context_window": 128_000, "max_output": 32_768}),
    ),
    ModelFamily("openai:o1*|openai:o3*|openai:o4*", _REASONING),
    # OpenAI's chat families.
    ModelFamily("openai:gpt-4.1-mini|openai:gpt-4.1-mini-2*", _GPT41, _price(0.4, 1.6, 0.1)),
    ModelFamily("openai:gpt-4.1-nano|openai:gpt-4.1-nano-2*", _GPT41, _price(0.1, 0.4, 0.025)),
    ModelFamily("openai:gpt-4.1|openai:gpt-4.1-2*", _GPT41, _price(2.0, 8.0, 0.5)),
    ModelFamily("openai:gpt-4.1*", _GPT41),
    ModelFamily("openai:gpt-4o-mini|openai:gpt-4o-mini-2*", _GPT4O, _price(0.15, 0.6, 0.075)),
    ModelFamily("openai:gpt-4o|openai:gpt-4o-2*", _GPT4O, _price(2.5, 10.0, 1.25)),
    ModelFamily("openai:gpt-4o*", _GPT4O),
    # Anyone else's model behind OPENAI_BASE_URL (llama.cpp, vLLM, Ollama) or a new OpenAI one.
    ModelFamily("openai:*", ModelInfo()),
    # Anthropic: cache reads cost 0.1 × input, writes 1.25 × input.
    ModelFamily(
        "anthropic:claude-sonnet-4-5|anthropic:claude-sonnet-4-5-2*",
        _CLAUDE_4,
        _price(3.0, 15.0, 0.3, 3.75),
    ),
    ModelFamily(
        "anthropic:claude-haiku-4-5|anthropic:claude-haiku-4-5-2*",
        _CLAUDE_4,
        _price(1.0, 5.0, 0.1, 1.25),
    ),
    ModelFamily(
        "anthropic:claude-opus-4-1|anthropic:claude-opus-4-1-2*",
        _CLAUDE_OPUS_4,
        _price(15.0, 75.0, 1.5, 18.75),
    ),
    ModelFamily("anthropic:claude-opus-4*", _CLAUDE_OPUS_4),
    ModelFamily(
        "anthropic:claude-sonnet-4*|anthropic:claude-haiku-4*|anthropic:claude-3-7-sonnet*",
        _CLAUDE_4,
    ),
    ModelFamily("anthropic:claude-*", ModelInfo(context_window=200_000)),
    ModelFamily("anthropic:*", ModelInfo()),
    ModelFamily("*", ModelInfo()),
)

_FIELDS = ", ".join(ModelInfo.model_fields)
_EXAMPLE = (
    '{"openai:my-local": {"context_window": 16000, "max_output": 2048, "temperature": false}}'
)


def matches(pattern: str, spec: str) -> bool:
    """Whether ``spec`` (``provider:model``) matches one of the ``|``-separated patterns."""
    return any(fnmatchcase(spec, alternative) for alternative in pattern.split("|"))


_KNOWN_MAX = 1024
"""Most model specs a catalog remembers its answers for."""


class ModelCatalog:
    """The built-in families with the operator's ``ERRANDS_MODELS`` changes on top."""

    def __init__(
        self,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        families: tuple[ModelFamily, ...] = FAMILIES,
    ) -> None:
        self._families = families
        self._overrides = {key: dict(fields) for key, fields in (overrides or {}).items()}
        self._known: dict[tuple[str, bool], ModelInfo] = {}
        """Each answer, once: a model step asks several times, and the catalog never changes."""

    def lookup(self, spec: str, *, official_api: bool = True) -> ModelInfo:
        """What errands knows about ``spec``; ``official_api`` False: an OpenAI-compatible
        server other than OpenAI's own, which settles an open ``output_limit`` as ``both``."""
        known = self._known.get((spec, official_api))
        if known is None:
            if len(self._known) >= _KNOWN_MAX:  # tasks name their models: keep it bounded
                self._known.clear()
            known = self._known[spec, official_api] = self._looked_up(spec, official_api)
        return known

    def _looked_up(self, spec: str, official_api: bool) -> ModelInfo:
        info = next((f.info for f in self._families if matches(f.match, spec)), ModelInfo())
        changes: dict[str, Any] = {}
        # Every matching override applies, the most specific (exact, then longest) last.
        for key in sorted(
            (k for k in self._overrides if matches(k, spec)), key=lambda k: _specificity(k, spec)
        ):
            changes.update(self._overrides[key])
        if info.output_limit is None and changes.get("output_limit") is None:
            changes["output_limit"] = "max_completion_tokens" if official_api else "both"
        return info.model_copy(update=changes)


def model_catalog(override_json: str | None) -> ModelCatalog:
    """The catalog with ``ERRANDS_MODELS`` on top; ``ValueError`` (starting with the variable's
    name) saying what is wrong and what is accepted."""
    if not override_json:
        return ModelCatalog()
    try:
        raw = json.loads(override_json)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"ERRANDS_MODELS is not valid JSON ({error.msg}); expected an object like {_EXAMPLE}"
        ) from None
    if not isinstance(raw, dict):
        raise ValueError(
            f"ERRANDS_MODELS is a JSON {type(raw).__name__}, not an object; expected "
            f'{{"provider:model": {{field: value}}}} with fields {_FIELDS}'
        )
    overrides: dict[str, dict[str, Any]] = {}
    for key, fields in raw.items():
        if not all(_is_pattern(alternative) for alternative in key.split("|")):
            raise ValueError(
                f"ERRANDS_MODELS names {key!r}, not a provider:model pattern; give e.g. "
                '"openai:my-local", "openai:qwen*" or "anthropic:claude-*"'
            )
        if not isinstance(fields, dict):
            raise ValueError(
                f"ERRANDS_MODELS gives {key!r} a JSON {type(fields).__name__}, not an object of "
                f"fields ({_FIELDS})"
            )
        try:
            checked = ModelInfo.model_validate(fields)
        except ValidationError as error:
            problems = ", ".join(
                f"{'.'.join(map(str, (key, *e['loc'])))}: {e['msg'].lower()}"
                for e in error.errors()
            )
            raise ValueError(
                f"ERRANDS_MODELS has a wrong field ({problems}); the fields are {_FIELDS}"
            ) from None
        overrides[key] = checked.model_dump(include=set(fields))
    return ModelCatalog(overrides)


CATALOG = ModelCatalog()
"""The built-in catalog, for callers that were given no other."""


def _is_pattern(alternative: str) -> bool:
    provider, sep, model = alternative.partition(":")
    return alternative in ("*", "demo") or (
        bool(sep) and provider in ("openai", "anthropic") and bool(model.strip())
    )


def _specificity(pattern: str, spec: str) -> tuple[bool, int]:
    alternatives = [a for a in pattern.split("|") if fnmatchcase(spec, a)]
    return spec in alternatives, max(len(a) for a in alternatives)
