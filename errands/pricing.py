"""Turning the usage ledger into money: a price table per model, configurable.

Prices are US dollars per million tokens. Cached input tokens are billed at the cached rate
instead of the input rate. The table travels in the task input (resolved by the frontend from
``ERRANDS_PRICES``), so a running task computes its cost deterministically.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from errands.contracts import UsageLedger


class ModelPrice(BaseModel):
    input: float = 0.0
    output: float = 0.0
    cached: float = 0.0


DEFAULT_PRICES: dict[str, ModelPrice] = {
    "demo": ModelPrice(),
    "openai:gpt-4.1": ModelPrice(input=2.0, output=8.0, cached=0.5),
    "openai:gpt-4.1-mini": ModelPrice(input=0.4, output=1.6, cached=0.1),
    "anthropic:claude-sonnet-4-5": ModelPrice(input=3.0, output=15.0, cached=0.3),
}


def price_table(override_json: str | None) -> dict[str, ModelPrice]:
    """The defaults, with ``ERRANDS_PRICES`` (a JSON object model → {input, output, cached})
    on top."""
    table = dict(DEFAULT_PRICES)
    if override_json:
        try:
            raw = json.loads(override_json)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"ERRANDS_PRICES is not valid JSON ({error.msg}); expected an object like "
                '{"openai:gpt-4.1": {"input": 2.0, "output": 8.0, "cached": 0.5}}'
            ) from None
        if not isinstance(raw, dict):
            raise ValueError(
                f"ERRANDS_PRICES is a JSON {type(raw).__name__}, not an object; expected "
                '{"provider:model": {"input": …, "output": …, "cached": …}} in USD per million '
                "tokens"
            )
        table.update({model: ModelPrice.model_validate(price) for model, price in raw.items()})
    return table


def cost_usd(ledger: UsageLedger, prices: dict[str, ModelPrice]) -> float:
    total = 0.0
    for model, usage in ledger.by_model().items():
        price = prices.get(model, ModelPrice())
        uncached = max(0, usage.input_tokens - usage.cached_tokens)
        total += (
            uncached * price.input
            + usage.cached_tokens * price.cached
            + usage.output_tokens * price.output
        ) / 1_000_000
    return round(total, 6)
