"""Turning the usage ledger into money: the catalog's prices, configurable.

Prices are US dollars per million tokens (``ModelPrice``) and come from the model catalog
(``errands.agent.model_catalog``), with ``ERRANDS_PRICES`` on top. Input tokens read from the
prompt cache are billed at the cached rate, tokens written to it at the cache-write rate, the
rest at the input rate. The table travels in the task input (resolved by the frontend), so a
running task computes its cost deterministically. Keys are model specs or patterns
(``openai:gpt-4.1-2*``): a model's price is its exact key's, else the longest matching
pattern's.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase

from errands.agent.model_catalog import FAMILIES
from errands.contracts.messages import ModelPrice, ModelUsage, UsageLedger

__all__ = ["DEFAULT_PRICES", "ModelPrice", "cost_usd", "price_for", "price_table"]

ANTHROPIC_CACHE_WRITE = 1.25
"""Anthropic bills a 5-minute cache write at 1.25 × the input rate."""

DEFAULT_PRICES: dict[str, ModelPrice] = {
    pattern: family.price
    for family in FAMILIES
    if family.price is not None
    for pattern in family.match.split("|")
}


def price_table(override_json: str | None) -> dict[str, ModelPrice]:
    """The catalog's prices, with ``ERRANDS_PRICES`` (a JSON object model →
    {input, output, cached, cache_write}) on top."""
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


def price_for(model: str, prices: dict[str, ModelPrice]) -> ModelPrice:
    """``model``'s price: its own key, else the longest pattern it matches; unknown: free."""
    if model in prices:
        return prices[model]
    matching = [key for key in prices if fnmatchcase(model, key)]
    return prices[max(matching, key=len)] if matching else ModelPrice()


def cost_usd(ledger: UsageLedger, prices: dict[str, ModelPrice]) -> float:
    total = 0.0
    for model, usage in ledger.by_model().items():
        total += _cost(usage, price_for(model, prices), anthropic=model.startswith("anthropic:"))
    return round(total, 6)


def _cost(usage: ModelUsage, price: ModelPrice, *, anthropic: bool) -> float:
    write_rate = price.cache_write
    if write_rate is None:
        write_rate = price.input * (ANTHROPIC_CACHE_WRITE if anthropic else 1.0)
    fresh = max(0, usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens)
    return (
        fresh * price.input
        + usage.cached_tokens * price.cached
        + usage.cache_write_tokens * write_rate
        + usage.output_tokens * price.output
    ) / 1_000_000
