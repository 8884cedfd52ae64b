"""Settings as an operator meets them: every variable documented, every bad value refused with
one line naming it, durations with units, a task's constants from the environment, and a report
that never shows a secret."""

from __future__ import annotations

import ast
import inspect
import json

import pytest
from temporalio.exceptions import ApplicationError

from errands.adapters.routing import parse_model
from errands.agent.validation import check_model_spec
from errands.contracts.workflows import RoundSettings
from errands.errors import ConfigError
from errands.settings import Settings, load_settings, render_report

pytestmark = pytest.mark.fast

VARIABLES = [info.alias for info in Settings.model_fields.values()]
OPENAI_KEY = "sk-proj-" + "Zq7" * 10
TOKEN = "gateway-token-" + "x9" * 16  # 46 characters: a token must have 43
DB_PASSWORD = "hunter2-secret"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: the machine's own ERRANDS_* and provider keys do not leak in."""
    for variable in VARIABLES:
        monkeypatch.delenv(str(variable), raising=False)


def refusal(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> ConfigError:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    return caught.value


# -- every variable is documented --------------------------------------------------------------


def test_every_settings_field_has_a_docstring() -> None:
    fields, documented = set(), set()
    parts = [c for c in Settings.__mro__ if c.__module__.startswith("errands.settings")]
    body = []
    for part in parts:
        (cls,) = ast.parse(inspect.getsource(part)).body
        assert isinstance(cls, ast.ClassDef)
        body += list(zip(cls.body, [*cls.body[1:], None], strict=True))
    for node, after in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            fields.add(node.target.id)
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and str(after.value.value).strip()
            ):
                documented.add(node.target.id)
    assert fields == set(Settings.model_fields)
    assert fields - documented == set()


# -- a bad value is one line naming its variable and what it accepts ---------------------------


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ERRANDS_STEP_BUDGET", "0"),
        ("ERRANDS_STEP_BUDGET", "lots"),
        ("ERRANDS_BRANCH_STEP_LIMIT", "0"),
        ("ERRANDS_MAX_SUBTASKS", "65"),
        ("ERRANDS_MAX_REPAIRS", "-1"),
        ("ERRANDS_SAME_FAILURE_ROUNDS", "0"),
        ("ERRANDS_DEADLINE", "soon"),
        ("ERRANDS_DEADLINE", "0"),
        ("ERRANDS_DEADLINE", "-5m"),
        ("ERRANDS_MAX_OUTPUT_TOKENS", "4k"),
        ("ERRANDS_MODEL_TIMEOUT", "5 minutes"),
        ("ERRANDS_MODEL_MAX_ATTEMPTS", "0"),
        ("ERRANDS_ROUND_RETRY_LIMIT", "0"),
        ("ERRANDS_ROUND_RETRY_DELAY", "30x"),
        ("ERRANDS_ASK_TIMEOUT", "1w"),
        ("ERRANDS_ADVISOR_LIMIT", "0"),
        ("ERRANDS_SIDE_QUESTION_TIMEOUT", "0s"),
        ("ERRANDS_MAX_HISTORY_EVENTS", "99"),
        ("ERRANDS_LOG_LEVEL", "loud"),
        ("ERRANDS_LOG_JSON", "maybe"),
        ("ERRANDS_OTEL", "2"),
        ("ERRANDS_SUBTASK_TYPES", "mypackage.types"),
        ("ERRANDS_SUBTASK_TYPES", "tests.plugins:TYPES, 1bad:X"),
        ("ERRANDS_METRICS_BIND", "localhost:9464"),
        ("ERRANDS_METRICS_BIND", "127.0.0.1:0"),
        ("ERRANDS_METRICS_BIND", "::1:9464"),
        ("ERRANDS_MODEL", "foo"),
        ("ERRANDS_FALLBACK_MODEL", "openai"),
        ("ERRANDS_ADVISOR_MODEL", "openai:"),
        ("ERRANDS_SIDE_QUESTION_MODEL", "mistral:large"),
        ("ERRANDS_PRICES", "{bad"),
        ("ERRANDS_PRICES", '{"demo": {"input": "free"}}'),
        ("ERRANDS_PRICES", "[1]"),
        ("ERRANDS_DATABASE_URL", "mysql://x"),
        ("ERRANDS_DATABASE_URL", ":memory:"),
        ("ERRANDS_DEV_PORT", "abc"),
        ("ERRANDS_DEV_PORT", "0"),
        ("ERRANDS_DEV_UI_PORT", "70000"),
        ("TEMPORAL_ADDRESS", "http://temporal:7233"),
        ("TEMPORAL_ADDRESS", "temporal"),
        ("OPENAI_BASE_URL", "localhost:8000"),
    ],
)
def test_a_bad_value_is_a_config_error_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    error = refusal(monkeypatch, variable, value)
    assert error.setting == variable
    assert str(error).startswith(f"{variable}=")
    assert "\n" not in str(error)
    assert str(error).endswith("; fix or unset it")


def test_a_refusal_says_what_the_variable_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    error = refusal(monkeypatch, "ERRANDS_STEP_BUDGET", "0")
    assert str(error) == (
        "ERRANDS_STEP_BUDGET=0 is not allowed: give a whole number from 1 to 100,000; "
        "fix or unset it"
    )


def test_a_bad_flag_given_by_variable_name_names_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(ERRANDS_DEV_PORT=0)
    assert caught.value.setting == "ERRANDS_DEV_PORT"


def test_several_bad_values_are_all_named_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRANDS_MAX_SUBTASKS", "100")
    monkeypatch.setenv("ERRANDS_LOG_LEVEL", "loud")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "ERRANDS_MAX_SUBTASKS=100" in message
    assert "ERRANDS_LOG_LEVEL=loud" in message
    assert "\n" not in message
    assert caught.value.setting is None


def test_a_refused_database_url_does_not_show_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    error = refusal(monkeypatch, "ERRANDS_DATABASE_URL", f"mysql://app:{DB_PASSWORD}@db/app")
    assert error.setting == "ERRANDS_DATABASE_URL"
    assert DB_PASSWORD not in str(error)


# -- good values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("TEMPORAL_ADDRESS", "127.0.0.1:1"),
        ("TEMPORAL_ADDRESS", "temporal-frontend.temporal.svc.cluster.local:7233"),
        ("TEMPORAL_ADDRESS", "[::1]:7233"),
        ("ERRANDS_METRICS_BIND", "0.0.0.0:9464"),
        ("ERRANDS_METRICS_BIND", "[::1]:9464"),
        ("ERRANDS_MODEL", "demo"),
        ("ERRANDS_MODEL", "anthropic:claude-sonnet-4-5"),
        ("ERRANDS_SIDE_QUESTION_MODEL", "openai:gpt-4.1-mini"),
        ("ERRANDS_SUBTASK_TYPES", "tests.plugins:TYPES, other_pkg.mod:ONE,"),
        ("ERRANDS_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none"),
        ("ERRANDS_DATABASE_URL", "sqlite:///tmp/errands/sessions.db"),
        ("ERRANDS_PRICES", '{"openai:gpt-4.1": {"input": 2, "output": 8}}'),
        ("ERRANDS_DEV_PORT", "65535"),
        ("ERRANDS_MAX_REPAIRS", "0"),
    ],
)
def test_a_good_value_is_accepted(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    assert load_settings().report()[variable]["default"] is False


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900.0), ("90", 90.0), ("90s", 90.0), ("24h", 86400.0), ("2d", 172800.0)]
    + [("1.5h", 5400.0)],
)
def test_a_duration_is_seconds_or_a_number_with_a_unit(
    monkeypatch: pytest.MonkeyPatch, text: str, seconds: float
) -> None:
    monkeypatch.setenv("ERRANDS_DEADLINE", text)
    assert load_settings().deadline_seconds == seconds


def test_the_log_level_is_case_insensitive_and_kept_upper_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERRANDS_LOG_LEVEL", "warning")
    assert load_settings().log_level == "WARNING"


def test_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRANDS_DEV_PORT", "")
    assert load_settings().dev_port == 7233


def test_a_flag_wins_over_the_environment_and_none_means_not_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERRANDS_DEV_PORT", "7300")
    assert load_settings(ERRANDS_DEV_PORT=7400).dev_port == 7400
    assert load_settings(dev_port=7500).dev_port == 7500
    assert load_settings(ERRANDS_DEV_PORT=None).dev_port == 7300


def test_an_override_that_names_no_setting_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="ERRANDS_DEV_PROT"):
        load_settings(ERRANDS_DEV_PROT=7400)


# -- a task's constants ------------------------------------------------------------------------


def test_round_settings_defaults_equal_those_of_a_task_input() -> None:
    assert load_settings().round_settings() == RoundSettings()


def test_round_settings_reflect_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRANDS_STEP_BUDGET", "40")
    monkeypatch.setenv("ERRANDS_MAX_REPAIRS", "0")
    monkeypatch.setenv("ERRANDS_DEADLINE", "2h")
    monkeypatch.setenv("ERRANDS_ASK_TIMEOUT", "2d")
    monkeypatch.setenv("ERRANDS_SIDE_QUESTION_TIMEOUT", "1m")
    monkeypatch.setenv("ERRANDS_MAX_HISTORY_EVENTS", "500")
    rounds = load_settings().round_settings()
    assert (rounds.step_budget, rounds.max_repairs) == (40, 0)
    assert rounds.deadline_seconds == 7200.0
    assert rounds.ask_timeout_hours == 48.0
    assert rounds.side_question_timeout_seconds == 60.0
    assert rounds.max_history_events == 500


# -- model specs: one check for settings, frontends and the worker -----------------------------


def test_a_model_spec_is_split_into_provider_and_model() -> None:
    assert check_model_spec("openai:gpt-4.1") == ("openai", "gpt-4.1")
    assert check_model_spec("demo") == ("demo", "demo")


def test_the_worker_refuses_a_bad_model_spec_as_non_retryable_unknown_model() -> None:
    with pytest.raises(ApplicationError) as caught:
        parse_model("foo")
    assert (caught.value.type, caught.value.non_retryable) == ("unknown_model", True)
    assert caught.value.message.startswith("model 'foo' is not of the form provider:model")


# -- the report --------------------------------------------------------------------------------


def test_the_report_masks_secrets_and_never_contains_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ERRANDS_API_TOKEN", TOKEN)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "short")
    monkeypatch.setenv("ERRANDS_DATABASE_URL", f"postgresql://errands:{DB_PASSWORD}@db:5432/e")
    report = load_settings().report()
    shown = json.dumps(report) + render_report(report)
    for secret in (OPENAI_KEY, TOKEN, "short", DB_PASSWORD):
        assert secret not in shown
    assert report["OPENAI_API_KEY"]["value"] == "****" + OPENAI_KEY[-4:]
    assert report["ANTHROPIC_API_KEY"]["value"] == "set"
    assert report["ERRANDS_DATABASE_URL"]["value"] == "postgresql://errands:****@db:5432/e"


def test_the_report_names_every_setting_with_its_value_default_and_doc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERRANDS_DEADLINE", "15m")
    report = json.loads(json.dumps(load_settings().report()))
    assert list(report) == VARIABLES
    assert report["ERRANDS_DEADLINE"] == {
        "value": 900.0,
        "default": False,
        "doc": "Wall-clock time of a task after which its next round is final (e.g. 6h).",
    }
    assert report["ERRANDS_STEP_BUDGET"]["default"] is True
    assert all(entry["doc"] for entry in report.values())


def test_the_rendered_report_is_one_aligned_line_per_setting() -> None:
    lines = render_report(load_settings().report()).splitlines()
    assert len(lines) == len(VARIABLES)
    assert len({line.index("— ") for line in lines if len(line.split()[1]) <= 40}) == 1
    budget = next(line for line in lines if line.startswith("ERRANDS_STEP_BUDGET "))
    assert budget.split()[1:3] == ["24", "(default)"]


def test_the_temporal_ui_link_follows_where_temporal_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TEMPORAL_ADDRESS", "ERRANDS_TEMPORAL_UI_URL", "ERRANDS_DEV_UI_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ERRANDS_DEV_UI_PORT", "8299")
    assert load_settings().temporal_ui() == "http://127.0.0.1:8299", "the embedded dev server's"
    monkeypatch.setenv("TEMPORAL_ADDRESS", "temporal.internal:7233")
    assert load_settings().temporal_ui() is None, "a cluster's UI is not guessed"
    monkeypatch.setenv("ERRANDS_TEMPORAL_UI_URL", "https://ui.example.com/")
    assert load_settings().temporal_ui() == "https://ui.example.com"
    monkeypatch.setenv("ERRANDS_TEMPORAL_UI_URL", "not a url")
    with pytest.raises(ConfigError, match="ERRANDS_TEMPORAL_UI_URL"):
        load_settings()


STATE_KEY = "state-key-" + "k7" * 17  # 44 characters: each key needs 43


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("short", "key 1 has 5 characters; each needs at least 43"),
        (f"{STATE_KEY},", "key 2 has 0 characters"),
        (f"{STATE_KEY}, {STATE_KEY}", "key 2 is key 1 again; list each key once"),
    ],
)
def test_mcp_state_keys_are_long_listed_once_and_never_said(
    monkeypatch: pytest.MonkeyPatch, value: str, said: str
) -> None:
    error = str(refusal(monkeypatch, "ERRANDS_MCP_STATE_KEYS", value))
    assert "ERRANDS_MCP_STATE_KEYS" in error and said in error
    assert STATE_KEY not in error


def test_mcp_state_keys_are_read_in_order_stripped_and_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = STATE_KEY.replace("k7", "q2")
    monkeypatch.setenv("ERRANDS_MCP_STATE_KEYS", f" {STATE_KEY} ,{other}")
    settings = load_settings()
    assert settings.state_keys() == [STATE_KEY, other]
    report = settings.report()
    shown = json.dumps(report) + render_report(report)
    assert STATE_KEY not in shown and other[:-4] not in shown
    assert report["ERRANDS_MCP_STATE_KEYS"]["value"] == "****" + other[-4:]


def test_every_check_is_bound_to_fields_settings_has() -> None:
    """The checks are bound in ``SettingsChecks`` to fields ``Settings`` declares, unchecked
    there (``check_fields=False``): a misspelt field, or a ``Settings`` attribute of the same
    name as a check, would drop it silently."""
    from errands.settings._checks import SettingsChecks

    bound = Settings.__pydantic_decorators__.field_validators
    assert bound.keys() == SettingsChecks.__pydantic_decorators__.field_validators.keys()
    for name, check in bound.items():
        assert set(check.info.fields) <= set(Settings.model_fields), name
    assert Settings.__pydantic_decorators__.model_validators.keys() == {"_together"}
