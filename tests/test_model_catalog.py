"""The model catalog: families matched by pattern, ERRANDS_MODELS on top, prices from one place,
and usage fields that old payloads still parse into."""

from __future__ import annotations

import pytest

from errands.agent.model_catalog import CATALOG, ModelInfo, matches, model_catalog
from errands.agent.pricing import DEFAULT_PRICES, cost_usd, price_for, price_table
from errands.contracts.messages import ModelPrice, ModelRequest, ModelUsage, Usage, UsageLedger
from errands.errors import ConfigError
from errands.settings import load_settings

pytestmark = pytest.mark.fast


def test_a_pattern_matches_any_of_its_alternatives() -> None:
    assert matches("openai:o1*|openai:o3*", "openai:o3-mini")
    assert not matches("openai:o1*|openai:o3*", "openai:gpt-4o")
    assert matches("openai:gpt-4.1|openai:gpt-4.1-2*", "openai:gpt-4.1-2025-04-14")
    assert not matches("openai:gpt-4.1|openai:gpt-4.1-2*", "openai:gpt-4.1-mini")


@pytest.mark.parametrize(
    "spec", ["openai:o1", "openai:o3-mini", "openai:o4-mini-2025-04-16", "openai:gpt-5-nano"]
)
def test_reasoning_families_take_no_temperature_and_report_reasoning_tokens(spec: str) -> None:
    for official in (True, False):
        info = CATALOG.lookup(spec, official_api=official)
        assert (info.temperature, info.reasoning_tokens) == (False, True)
        assert info.output_limit == "max_completion_tokens"


def test_chat_families_take_a_temperature_and_know_their_window() -> None:
    info = CATALOG.lookup("openai:gpt-4.1-mini-2025-04-14")
    assert (info.temperature, info.reasoning_tokens) == (True, False)
    assert (info.context_window, info.max_output) == (1_047_576, 32_768)
    assert CATALOG.lookup("anthropic:claude-sonnet-4-5-20250929").context_window == 200_000


@pytest.mark.parametrize("spec", ["openai:smollm2", "anthropic:some-proxy-model", "demo"])
def test_unknown_models_get_the_conservative_defaults(spec: str) -> None:
    info = CATALOG.lookup(spec)
    assert (info.context_window, info.max_output, info.temperature) == (32_000, 4_096, True)


def test_the_output_limit_of_an_open_family_is_settled_by_the_server() -> None:
    assert CATALOG.lookup("openai:gpt-4.1").output_limit == "max_completion_tokens"
    assert CATALOG.lookup("openai:gpt-4.1", official_api=False).output_limit == "both"
    assert CATALOG.lookup("openai:smollm2", official_api=False).output_limit == "both"


def test_errands_models_changes_only_the_fields_it_names() -> None:
    catalog = model_catalog('{"openai:gpt-4.1": {"context_window": 100000}}')

    info = catalog.lookup("openai:gpt-4.1")

    assert info.context_window == 100_000
    assert info.max_output == CATALOG.lookup("openai:gpt-4.1").max_output


def test_errands_models_describes_a_local_model() -> None:
    catalog = model_catalog(
        '{"openai:my-local": {"context_window": 16000, "max_output": 2048, "temperature": false,'
        ' "output_limit": "max_tokens"}}'
    )

    assert catalog.lookup("openai:my-local", official_api=False) == ModelInfo(
        context_window=16_000, max_output=2_048, temperature=False, output_limit="max_tokens"
    )
    assert catalog.lookup("openai:other-local").context_window == 32_000


def test_the_most_specific_override_wins_whatever_the_order() -> None:
    catalog = model_catalog(
        '{"openai:my-local": {"max_output": 1000}, "openai:my-*": {"max_output": 2000},'
        ' "openai:*": {"max_output": 3000, "context_window": 8000}}'
    )

    info = catalog.lookup("openai:my-local")

    assert (info.max_output, info.context_window) == (1000, 8000)
    assert catalog.lookup("openai:my-other").max_output == 2000


@pytest.mark.parametrize(
    "value",
    [
        "{bad",
        "[1]",
        '{"openai:x": 3}',
        '{"gpt-4.1": {"context_window": 1000}}',
        '{"openai:x": {"context_window": 0}}',
        '{"openai:x": {"colour": "blue"}}',
        '{"openai:x": {"output_limit": "max_output_tokens"}}',
        '{"openai:x": {"price": {"input": 1}}}',
    ],
)
def test_a_bad_errands_models_is_a_one_line_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ERRANDS_MODELS", value)

    with pytest.raises(ConfigError) as caught:
        load_settings()

    error = caught.value
    assert error.setting == "ERRANDS_MODELS"
    assert str(error).startswith("ERRANDS_MODELS=")
    assert "\n" not in str(error)
    assert str(error).endswith("; fix or unset it")


def test_a_wrong_field_is_named_with_its_model_and_the_fields_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERRANDS_MODELS", '{"openai:x": {"context_window": 0}}')

    with pytest.raises(ConfigError) as caught:
        load_settings()

    assert "openai:x.context_window" in str(caught.value)
    assert "max_output" in str(caught.value)


def test_a_good_errands_models_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRANDS_MODELS", '{"openai:my-local": {"context_window": 16000}}')

    settings = load_settings()

    assert model_catalog(settings.models).lookup("openai:my-local").context_window == 16_000


# -- prices ---------------------------------------------------------------------------------


def test_prices_come_from_the_catalog_and_cover_dated_snapshots() -> None:
    table = price_table(None)

    assert table == DEFAULT_PRICES
    assert table["openai:gpt-4.1"] == ModelPrice(input=2.0, output=8.0, cached=0.5)
    assert price_for("openai:gpt-4.1-2025-04-14", table) == table["openai:gpt-4.1"]
    assert price_for("openai:gpt-4.1-mini-2025-04-14", table) == table["openai:gpt-4.1-mini"]
    assert price_for("openai:smollm2", table) == ModelPrice()


def test_errands_prices_still_wins_over_the_catalog() -> None:
    table = price_table(
        '{"openai:gpt-4.1": {"input": 1, "output": 1}, "openai:mine-*": {"input": 9}}'
    )

    assert table["openai:gpt-4.1"] == ModelPrice(input=1, output=1)
    assert price_for("openai:mine-large", table).input == 9


def test_anthropic_cache_reads_cost_a_tenth_and_writes_a_quarter_more() -> None:
    ledger = UsageLedger()
    ledger.charge(
        "rounds",
        "anthropic:claude-sonnet-4-5",
        Usage(input_tokens=1_000_000, cached_tokens=500_000, cache_write_tokens=200_000),
    )

    cost = cost_usd(ledger, price_table(None))

    # 300k fresh at $3, 500k read at $0.30, 200k written at $3.75 per million.
    assert cost == pytest.approx(0.9 + 0.15 + 0.75)


def test_a_cache_write_without_its_own_price_follows_the_provider() -> None:
    usage = Usage(input_tokens=1_000_000, cache_write_tokens=1_000_000)
    prices = {"anthropic:x": ModelPrice(input=1.0), "openai:x": ModelPrice(input=1.0)}
    for model, expected in (("anthropic:x", 1.25), ("openai:x", 1.0)):
        ledger = UsageLedger()
        ledger.charge("rounds", model, usage)
        assert cost_usd(ledger, prices) == expected


def test_a_ledger_from_before_the_cache_fields_costs_what_it_did() -> None:
    old = UsageLedger.model_validate(
        {
            "parts": {
                "rounds": {
                    "openai:gpt-4.1": {
                        "calls": 2,
                        "failed_calls": 0,
                        "input_tokens": 2_000_000,
                        "output_tokens": 1_000_000,
                        "cached_tokens": 1_000_000,
                    }
                }
            }
        }
    )
    prices = {"openai:gpt-4.1": ModelPrice(input=2.0, output=8.0, cached=0.5)}

    assert cost_usd(old, prices) == 2.0 + 0.5 + 8.0


# -- usage fields ---------------------------------------------------------------------------


def test_old_payloads_parse_with_the_new_fields_at_zero() -> None:
    usage = Usage.model_validate({"input_tokens": 5, "output_tokens": 2, "cached_tokens": 1})
    request = ModelRequest.model_validate({"system": "s", "messages": []})

    assert (usage.cache_write_tokens, usage.reasoning_tokens) == (0, 0)
    assert request.cache_upto is None


def test_the_ledger_rolls_up_reasoning_tokens_and_cache_writes() -> None:
    ledger = UsageLedger()
    spent = Usage(input_tokens=100, output_tokens=50, cache_write_tokens=30, reasoning_tokens=20)
    ledger.charge("rounds", "openai:o3", spent)
    ledger.charge("branches", "openai:o3", spent, calls=2, failed_calls=1)
    ledger.merge("side_questions", {"openai:o3": ModelUsage.of(spent)})

    total = ledger.total()

    assert (total.calls, total.failed_calls) == (4, 1)
    assert (total.cache_write_tokens, total.reasoning_tokens) == (90, 60)
    assert ModelUsage.of(None, calls=3, failed_calls=3) == ModelUsage(calls=3, failed_calls=3)
