"""Asking the user (SPEC §2): the ask_user call the model makes, the answers frontends send,
decision memory, and every text the model reads back."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from errands.agent.asking import (
    Similarity,
    accepted_decision,
    answered_result,
    ask_user_spec,
    cancelled_result,
    check_citation,
    clean_answer,
    dismissed_result,
    find_remembered,
    headless_result,
    is_dismissal,
    malformed_result,
    parse_ask_user,
    pending_view,
    remembered_result,
    result_for_answer,
    similarity,
    terms,
    timed_out_result,
    validate_answer,
)
from errands.agent.control import NOT_BLANK
from errands.contracts.asking import Answer, QuestionSet, RememberedAnswer, decision_id
from errands.contracts.messages import ToolCall
from errands.errors import AnswerRejected, ModelMistake

pytestmark = pytest.mark.fast

SET_ID = "task-1/ask-1"


def ask(*questions: Any, set_id: str = SET_ID, **extra: Any) -> QuestionSet:
    arguments = json.dumps({"questions": list(questions), **extra})
    return parse_ask_user(ToolCall(id="c_ask", name="ask_user", arguments=arguments), set_id=set_id)


def mc(
    question: str = "Which database should we use?",
    header: str | None = "Database",
    options: tuple[str, ...] = ("PostgreSQL", "SQLite"),
    **extra: Any,
) -> dict[str, Any]:
    q: dict[str, Any] = {"question": question, "options": [{"label": o} for o in options]}
    if header is not None:
        q["header"] = header
    return {**q, **extra}


def text_q(question: str, header: str | None = None, **extra: Any) -> dict[str, Any]:
    q: dict[str, Any] = {"question": question, "type": "text"}
    if header is not None:
        q["header"] = header
    return {**q, **extra}


def answer(**answers: Any) -> dict[str, Any]:
    return {"question_set_id": SET_ID, "status": "answered", "answers": answers}


def remembered(qs: QuestionSet, **answers: Any) -> dict[str, dict[str, Any]]:
    decision = accepted_decision(qs, answer(**answers) | {"question_set_id": qs.id})
    assert decision is not None
    return {decision.decision_id: decision.model_dump()}


# --- the tool the model sees ------------------------------------------------------------------


def test_the_tool_is_named_ask_user_and_requires_questions() -> None:
    spec = ask_user_spec()
    assert spec.name == "ask_user"
    assert spec.parameters["required"] == ["questions"]
    assert set(spec.parameters["properties"]) == {"questions", "decision_id", "new_evidence"}


def test_the_schema_bounds_questions_to_three_and_options_to_two_through_four() -> None:
    questions = ask_user_spec().parameters["properties"]["questions"]
    options = questions["items"]["properties"]["options"]
    assert (questions["minItems"], questions["maxItems"]) == (1, 3)
    assert (options["minItems"], options["maxItems"]) == (2, 4)


def test_blank_rejections_are_visible_in_the_schema() -> None:
    params = ask_user_spec().parameters
    item = params["properties"]["questions"]["items"]["properties"]
    patterned = [
        item["question"],
        item["header"],
        item["options"]["items"]["properties"]["label"],
        params["properties"]["decision_id"],
        params["properties"]["new_evidence"],
    ]
    assert all(field["pattern"] == NOT_BLANK for field in patterned)


def test_the_schema_offers_both_question_types_with_multiple_choice_as_default() -> None:
    kind = ask_user_spec().parameters["properties"]["questions"]["items"]["properties"]["type"]
    assert kind["enum"] == ["multiple_choice", "text"]
    assert kind["default"] == "multiple_choice"


def test_the_description_says_other_is_automatic_and_not_to_add_one() -> None:
    description = ask_user_spec().description
    assert '"Other"' in description
    assert "added automatically" in description
    assert "never add" in description


def test_the_description_explains_how_to_reopen_a_decision() -> None:
    description = ask_user_spec().description
    assert "decision_id" in description and "new_evidence" in description


# --- parsing the call -------------------------------------------------------------------------


def test_a_valid_call_numbers_its_questions_q1_to_qn() -> None:
    qs = ask(mc(), text_q("Anything else?", "Notes"))
    assert qs.id == SET_ID
    assert [q.id for q in qs.questions] == ["q1", "q2"]


def test_type_multi_select_and_required_have_defaults() -> None:
    q = ask(mc()).questions[0]
    assert (q.type, q.multi_select, q.required) == ("multiple_choice", False, True)


def test_question_header_label_and_description_are_trimmed() -> None:
    qs = ask(
        {
            "question": "  Which database?  ",
            "header": " Database ",
            "options": [
                {"label": " PostgreSQL ", "description": "  robust  "},
                {"label": "SQLite"},
            ],
        }
    )
    q = qs.questions[0]
    assert (q.question, q.header) == ("Which database?", "Database")
    assert q.options[0].label == "PostgreSQL"
    assert q.options[0].description == "robust"


def test_a_blank_description_is_dropped() -> None:
    q = ask(mc(options=()) | {"options": [{"label": "A", "description": " "}, {"label": "B"}]})
    assert q.questions[0].options[0].description is None


def test_questions_sent_as_a_json_string_are_parsed() -> None:
    arguments = json.dumps({"questions": json.dumps([mc()])})
    qs = parse_ask_user(ToolCall(id="c", name="ask_user", arguments=arguments), set_id=SET_ID)
    assert qs.questions[0].labels() == ["PostgreSQL", "SQLite"]


def test_options_sent_as_a_json_string_are_parsed() -> None:
    q = mc()
    q["options"] = json.dumps(q["options"])
    assert ask(q).questions[0].labels() == ["PostgreSQL", "SQLite"]


def test_plain_string_options_are_read_as_labels() -> None:
    assert ask(mc() | {"options": ["Yes", "No"]}).questions[0].labels() == ["Yes", "No"]


def test_a_missing_header_is_cut_from_the_question_at_a_word_boundary() -> None:
    q = ask(mc("Which deployment target should the service use?", header=None)).questions[0]
    assert q.header == "Which deployment target…"
    assert q.header_derived


def test_a_short_question_without_a_header_is_its_own_header() -> None:
    q = ask(mc("Which database?", header="  ")).questions[0]
    assert (q.header, q.header_derived) == ("Which database", True)


def test_an_option_labelled_other_is_dropped_because_other_is_automatic() -> None:
    q = ask(mc(options=("PostgreSQL", "SQLite", " other "))).questions[0]
    assert q.labels() == ["PostgreSQL", "SQLite"]


def test_four_options_plus_an_own_other_are_accepted() -> None:
    q = ask(mc(options=("A", "B", "C", "D", "Other"))).questions[0]
    assert q.labels() == ["A", "B", "C", "D"]


def test_multi_select_also_accepts_the_camel_case_spelling() -> None:
    assert ask(mc(multiSelect=True)).questions[0].multi_select


def test_a_text_question_is_never_multi_select() -> None:
    assert not ask(text_q("Name?", multi_select=True)).questions[0].multi_select


def test_decision_id_and_new_evidence_are_trimmed() -> None:
    qs = ask(mc(), decision_id=" dec-0123456789abcdef ", new_evidence=" the budget changed ")
    assert qs.cited_decision_id == "dec-0123456789abcdef"
    assert qs.new_evidence == "the budget changed"
    assert qs.reopens


def test_blank_decision_id_and_new_evidence_count_as_absent() -> None:
    qs = ask(mc(), decision_id=" ", new_evidence="")
    assert (qs.cited_decision_id, qs.new_evidence, qs.reopens) == (None, None, False)


@pytest.mark.parametrize(
    ("questions", "message"),
    [
        ([mc(), mc(question="   ")], "question 2: `question` must be non-blank"),
        ([mc(options=("Only",))], "question 1: a multiple-choice question needs 2 to 4 options"),
        ([mc(options=("A", "B", "C", "D", "E"))], "question 1: .*5 given"),
        ([mc(options=("A", "Other"))], 'not counting "Other".*1 given'),
        ([mc(options=())], "question 1: a multiple-choice question needs 2 to 4 options"),
        ([mc() | {"options": None}], "needs 2 to 4 options"),
        ([mc(), mc(options=("A", "  "))], "question 2: option 2 needs a non-blank text `label`"),
        ([mc(options=("A", "B", "A"))], "question 1: options 1 and 3 have the same label 'A'"),
        ([mc(), mc(options=("Yes", "No ", " no"))], "question 2: options 2 and 3 have the same"),
        ([text_q("Name?", options=[{"label": "A"}, {"label": "B"}])], "takes no `options`"),
        ([mc(type="yes_no")], "question 1: unknown type 'yes_no'"),
        ([mc(type=3)], "question 1: unknown type 3"),
        ([mc(), "Which?"], "question 2: must be an object"),
        ([mc() | {"options": ["A", 7]}], "question 1: option 2 must be an object"),
        ([mc() | {"options": "A, B"}], "question 1: `options` must be a list"),
        ([mc() | {"options": [{"label": "A", "description": 1}, "B"]}], "`description` must be"),
        ([mc() | {"header": 5}], "question 1: `header` must be a short text"),
        ([mc(multi_select="yes")], "question 1: `multi_select` must be true or false"),
        ([mc(required=1)], "question 1: `required` must be true or false"),
        ([], "0 questions given; ask 1 to 3"),
        ([mc(), mc(), mc(), mc()], "4 questions given; ask 1 to 3"),
    ],
)
def test_an_invalid_question_is_rejected_with_its_position(
    questions: list[Any], message: str
) -> None:
    with pytest.raises(ModelMistake, match=message):
        ask(*questions)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"questions": [', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("{}", "`questions` must be a list"),
        ('{"questions": "not json at all"}', "`questions` must be a list"),
        ('{"questions": {"question": "Which?"}}', "`questions` must be a list"),
        ('{"questions": [{"question": "Q?", "type": "text"}], "decision_id": 7}', "`decision_id`"),
    ],
)
def test_malformed_arguments_are_rejected_for_the_model(arguments: str, message: str) -> None:
    with pytest.raises(ModelMistake, match=message):
        parse_ask_user(ToolCall(id="c", name="ask_user", arguments=arguments), set_id=SET_ID)


def test_a_duplicate_label_error_names_both_positions() -> None:
    with pytest.raises(ModelMistake) as caught:
        ask(mc(options=("Fast", "Cheap", " fast ")))
    assert "options 1 and 3" in str(caught.value)


# --- decision ids -----------------------------------------------------------------------------


def test_the_decision_id_is_sha256_over_lowercased_trimmed_prompts_and_labels() -> None:
    qs = ask(mc("Which database?", options=("PostgreSQL", "SQLite")), text_q("Name it?"))
    hashed = b"which database?\x00postgresql\x00sqlite\x00name it?\x00"
    assert decision_id(qs) == "dec-" + hashlib.sha256(hashed).hexdigest()[:16]
    assert qs.decision_id == decision_id(qs)


def test_the_decision_id_ignores_case_and_surrounding_whitespace() -> None:
    a = ask(mc("Which database?", options=("PostgreSQL", "SQLite")))
    b = ask(mc("  WHICH DATABASE?\n", options=(" postgresql", "SQLITE  ")))
    assert decision_id(a) == decision_id(b)


def test_the_decision_id_is_stable_across_question_sets_headers_and_descriptions() -> None:
    a = ask(mc(header="Database"), set_id="one")
    b = ask(
        mc(header="Storage")
        | {"options": [{"label": "PostgreSQL", "description": "x"}, {"label": "SQLite"}]},
        set_id="two",
    )
    assert a.decision_id == b.decision_id


def test_the_decision_id_depends_on_the_order_of_labels() -> None:
    a = ask(mc(options=("PostgreSQL", "SQLite")))
    b = ask(mc(options=("SQLite", "PostgreSQL")))
    assert a.decision_id != b.decision_id


def test_a_reopening_call_is_remembered_under_the_cited_id() -> None:
    qs = ask(mc(), decision_id="dec-aaaaaaaaaaaaaaaa", new_evidence="the data grew tenfold")
    assert qs.decision_id == "dec-aaaaaaaaaaaaaaaa"
    assert decision_id(qs) != qs.decision_id


def test_the_decision_id_travels_with_the_serialised_question_set() -> None:
    qs = ask(mc())
    dumped = qs.model_dump()
    assert dumped["decision_id"] == qs.decision_id
    assert QuestionSet.model_validate(dumped) == qs


# --- answers ----------------------------------------------------------------------------------


def test_an_offered_label_is_accepted() -> None:
    validate_answer(ask(mc()), answer(q1=["SQLite"]))


def test_labels_match_case_insensitively_and_are_stored_as_offered() -> None:
    assert clean_answer(ask(mc()), answer(q1=["  sqlite "])).answers == {"q1": ["SQLite"]}


def test_a_value_that_is_not_a_label_is_rejected_naming_the_offered_labels() -> None:
    with pytest.raises(AnswerRejected) as caught:
        validate_answer(ask(mc()), answer(q1=["NotALabel"]))
    message = str(caught.value)
    assert '"PostgreSQL", "SQLite"' in message
    assert '"Other: NotALabel"' in message


def test_free_text_prefixed_other_is_accepted_and_normalised() -> None:
    clean = clean_answer(ask(mc()), answer(q1=["other:   a managed service "]))
    assert clean.answers == {"q1": ["Other: a managed service"]}


@pytest.mark.parametrize("value", ["Other", "other:", "Other:   "])
def test_other_without_text_is_rejected(value: str) -> None:
    with pytest.raises(AnswerRejected, match='write your own answer after "Other:"'):
        validate_answer(ask(mc()), answer(q1=[value]))


def test_an_answer_for_another_question_set_names_the_pending_one() -> None:
    with pytest.raises(AnswerRejected, match="waiting for an answer is 'task-1/ask-1'"):
        validate_answer(ask(mc()), {"question_set_id": "old", "answers": {"q1": ["SQLite"]}})


def test_an_unknown_question_id_is_rejected_listing_the_real_ones() -> None:
    with pytest.raises(AnswerRejected, match="no question 'q3'.*its questions are q1, q2"):
        validate_answer(ask(mc(), mc("Which cache?", "Cache")), answer(q3=["Redis"]))


def test_several_labels_on_a_single_select_question_are_rejected() -> None:
    with pytest.raises(AnswerRejected, match="takes a single choice, but 2 were given"):
        validate_answer(ask(mc()), answer(q1=["PostgreSQL", "SQLite"]))


def test_several_labels_and_free_text_on_a_multi_select_question_are_accepted() -> None:
    qs = ask(mc(options=("Logs", "Metrics", "Traces"), multi_select=True))
    clean = clean_answer(qs, answer(q1=["Logs", "traces", "Other: audits"]))
    assert clean.answers == {"q1": ["Logs", "Traces", "Other: audits"]}


def test_a_repeated_label_counts_once() -> None:
    assert clean_answer(ask(mc()), answer(q1=["SQLite", "sqlite"])).answers == {"q1": ["SQLite"]}


def test_a_required_question_left_blank_is_rejected() -> None:
    qs = ask(mc(), mc("Which cache?", "Cache", ("Redis", "None")))
    with pytest.raises(AnswerRejected, match=r"q2 \(Cache\) needs an answer: choose one of"):
        validate_answer(qs, answer(q1=["SQLite"]))


def test_blank_strings_count_as_no_answer() -> None:
    qs = ask(mc(), mc("Which cache?", "Cache", ("Redis", "None")))
    with pytest.raises(AnswerRejected, match="q2 .* needs an answer"):
        validate_answer(qs, answer(q1=["SQLite"], q2=["  ", ""]))


def test_an_optional_question_may_be_left_unanswered() -> None:
    qs = ask(mc(), text_q("Anything else?", "Notes", required=False))
    assert clean_answer(qs, answer(q1=["SQLite"])).answers == {"q1": ["SQLite"], "q2": []}


def test_nothing_chosen_for_any_question_is_a_valid_dismissal() -> None:
    qs = ask(mc(), mc("Which cache?", "Cache", ("Redis", "None")))
    validate_answer(qs, answer(q1=[" "]))
    validate_answer(qs, answer())


def test_a_cancelled_answer_is_valid_and_its_answers_are_ignored() -> None:
    clean = clean_answer(
        ask(mc()), {"question_set_id": SET_ID, "status": "cancelled", "answers": {"q9": ["x"]}}
    )
    assert (clean.status, clean.answers) == ("cancelled", {})


def test_a_text_question_takes_any_text() -> None:
    qs = ask(text_q("What should the service be called?", "Name"))
    assert clean_answer(qs, answer(q1=[" ledger "])).answers == {"q1": ["ledger"]}


def test_a_text_question_takes_one_text_only() -> None:
    with pytest.raises(AnswerRejected, match="takes one written answer, but 2 were given"):
        validate_answer(ask(text_q("Name?")), answer(q1=["a", "b"]))


def test_a_bare_string_is_read_as_a_list_of_one() -> None:
    assert clean_answer(ask(mc()), answer(q1="SQLite")).answers == {"q1": ["SQLite"]}


def test_an_answer_sent_as_json_text_is_read() -> None:
    validate_answer(ask(mc()), json.dumps(answer(q1=["SQLite"])))


@pytest.mark.parametrize(
    "payload",
    [
        None,
        "not json",
        {"answers": {"q1": ["SQLite"]}},
        {"question_set_id": SET_ID, "status": "maybe"},
        {"question_set_id": SET_ID, "answers": {"q1": [3]}},
        {"question_set_id": SET_ID, "answers": ["SQLite"]},
    ],
)
def test_a_malformed_answer_is_rejected_showing_the_expected_form(payload: Any) -> None:
    with pytest.raises(AnswerRejected, match="not in the expected form.*question_set_id"):
        validate_answer(ask(mc()), payload)


def test_an_answer_error_is_a_value_error() -> None:
    assert issubclass(AnswerRejected, ValueError)


def test_an_answer_with_nothing_chosen_is_a_dismissal() -> None:
    assert is_dismissal(Answer(question_set_id=SET_ID, answers={"q1": [" "], "q2": []}))


def test_an_answer_with_any_choice_is_not_a_dismissal() -> None:
    assert not is_dismissal(Answer(question_set_id=SET_ID, answers={"q1": [], "q2": ["x"]}))


def test_a_cancelled_answer_is_not_a_dismissal() -> None:
    assert not is_dismissal(Answer(question_set_id=SET_ID, status="cancelled"))


# --- decision memory --------------------------------------------------------------------------


def test_an_accepted_answer_is_remembered_with_its_questions_and_summary() -> None:
    qs = ask(mc())
    decision = accepted_decision(qs, answer(q1=["sqlite"]))
    assert decision is not None
    assert decision.decision_id == qs.decision_id
    assert decision.answers == {"q1": ["SQLite"]}
    assert decision.summary == "- Database: SQLite"
    assert decision.headers == ["Database"]


def test_a_dismissal_is_not_a_decision() -> None:
    assert accepted_decision(ask(mc()), answer(q1=[])) is None


def test_a_cancelled_answer_is_not_a_decision() -> None:
    assert accepted_decision(ask(mc()), {"question_set_id": SET_ID, "status": "cancelled"}) is None


def test_the_same_question_is_answered_from_memory_by_its_id() -> None:
    decisions = remembered(ask(mc()), q1=["SQLite"])
    found = find_remembered(ask(mc("  which DATABASE should we use? "), set_id="later"), decisions)
    assert found is not None and found.answers == {"q1": ["SQLite"]}


def test_nothing_is_remembered_in_a_fresh_session() -> None:
    assert find_remembered(ask(mc()), {}) is None


def test_an_unrelated_question_is_asked() -> None:
    decisions = remembered(ask(mc()), q1=["SQLite"])
    assert (
        find_remembered(
            ask(mc("How should errors be reported?", "Errors", ("Email", "Slack"))), decisions
        )
        is None
    )


def test_a_citation_with_new_evidence_is_asked_again() -> None:
    first = ask(mc())
    decisions = remembered(first, q1=["SQLite"])
    again = ask(mc(), decision_id=first.decision_id, new_evidence="the data grew tenfold")
    assert find_remembered(again, decisions) is None


def test_a_citation_without_new_evidence_returns_the_cited_decision() -> None:
    first = ask(mc())
    decisions = remembered(first, q1=["SQLite"])
    again = ask(mc("Something else entirely?", "Other topic"), decision_id=first.decision_id)
    found = find_remembered(again, decisions)
    assert found is not None and found.decision_id == first.decision_id


def test_a_dismissal_record_is_never_returned_from_memory() -> None:
    qs = ask(mc())
    stored = RememberedAnswer(
        decision_id=qs.decision_id, question_set=qs, answers={"q1": []}, summary=""
    )
    assert find_remembered(qs, {qs.decision_id: stored.model_dump()}) is None


def test_a_record_that_does_not_validate_is_skipped() -> None:
    assert find_remembered(ask(mc()), {ask(mc()).decision_id: {"junk": True}}) is None


def test_an_unknown_cited_id_is_an_error_when_decisions_exist() -> None:
    decisions = remembered(ask(mc()), q1=["SQLite"])
    cited = ask(mc(), decision_id="dec-ffffffffffffffff", new_evidence="new facts")
    with pytest.raises(ModelMistake) as caught:
        check_citation(cited, decisions)
    message = str(caught.value)
    assert "'dec-ffffffffffffffff' is not a decision of this session" in message
    assert f"{ask(mc()).decision_id} (Database)" in message


def test_an_unknown_cited_id_is_accepted_when_nothing_is_remembered() -> None:
    check_citation(ask(mc(), decision_id="dec-ffffffffffffffff", new_evidence="x"), {})


def test_a_known_cited_id_passes_the_citation_check() -> None:
    first = ask(mc())
    check_citation(ask(mc(), decision_id=first.decision_id), remembered(first, q1=["SQLite"]))


# similarity: each clause pinned just above and just below its threshold


@pytest.mark.parametrize(
    ("shared_header", "options", "term_overlap", "same"),
    [
        (True, 0.5, 0.0, True),
        (True, 0.49, 0.0, False),
        (True, 0.0, 0.45, True),
        (True, 0.0, 0.44, False),
        (False, 0.5, 0.45, False),
        (False, 0.75, 0.35, True),
        (False, 0.74, 0.35, False),
        (False, 0.75, 0.34, False),
        (False, 0.0, 0.7, True),
        (False, 0.0, 0.69, False),
    ],
)
def test_similarity_thresholds(
    shared_header: bool, options: float, term_overlap: float, same: bool
) -> None:
    verdict = Similarity(shared_header=shared_header, options=options, terms=term_overlap)
    assert verdict.same_ambiguity is same


def test_similarity_is_jaccard_over_option_labels_and_terms() -> None:
    a = ask(mc("Which database?", "Database", ("PostgreSQL", "SQLite")))
    b = ask(mc("Pick a store", "Database", ("Postgre SQL", "MySQL")))
    # options compare as phrases: {postgresql, sqlite} vs {postgresql, mysql};
    # terms are words: {database, which, postgresql, sqlite} vs
    # {database, pick, store, postgre, sql, mysql} ("a" is too short to be a term)
    assert similarity(a.questions, b.questions) == Similarity(
        shared_header=True, options=1 / 3, terms=1 / 9
    )


def test_a_shared_header_with_half_the_options_is_the_same_ambiguity() -> None:
    decisions = remembered(ask(mc()), q1=["SQLite"])
    reworded = mc(
        "Where should the records be stored?", "Database", ("PostgreSQL", "SQLite", "MongoDB")
    )
    assert find_remembered(ask(reworded), decisions) is not None


def test_the_same_options_without_a_shared_header_need_more_overlap() -> None:
    decisions = remembered(ask(mc()), q1=["SQLite"])
    reworded = mc(
        "Where should the records be stored?", "Storage", ("PostgreSQL", "SQLite", "MongoDB")
    )
    assert find_remembered(ask(reworded), decisions) is None


def test_strong_option_overlap_with_some_shared_terms_is_the_same_ambiguity() -> None:
    decisions = remembered(ask(mc()), q1=["SQLite"])
    found = find_remembered(ask(mc("Which database should run this?", "Engine")), decisions)
    assert found is not None


def test_option_overlap_below_three_quarters_is_not_enough_without_a_header() -> None:
    decisions = remembered(ask(mc()), q1=["SQLite"])
    other = mc("Which database should run this?", "Engine", ("PostgreSQL", "SQLite", "MySQL"))
    assert find_remembered(ask(other), decisions) is None


def test_nearly_the_same_words_are_the_same_ambiguity() -> None:
    decisions = remembered(
        ask(text_q("Which database should we use for the project?")), q1=["Postgres"]
    )
    later = ask(text_q("Which database should we use for this project?"))
    assert find_remembered(later, decisions) is not None


def test_a_derived_header_never_counts_as_a_shared_header() -> None:
    a = ask(mc("Which option do you prefer for the cache?", header=None, options=("A1", "B1")))
    b = ask(mc("Which option do you prefer for logging?", header=None, options=("C1", "D1")))
    assert a.questions[0].header == b.questions[0].header
    assert not similarity(a.questions, b.questions).shared_header


def test_headers_and_terms_count_once_given_headers_differ() -> None:
    decisions = remembered(
        ask(text_q("Which database should we use for the project?", "DB")), q1=["Postgres"]
    )
    later = ask(text_q("Which database should we use for this project?", "Storage"))
    assert find_remembered(later, decisions) is None


def test_the_most_alike_remembered_decision_wins() -> None:
    loose = remembered(
        ask(
            mc(
                "Where should the records be stored?",
                "Database",
                ("PostgreSQL", "SQLite", "MongoDB"),
            ),
            set_id="a",
        ),
        q1=["MongoDB"],
    )
    close = remembered(ask(mc("Which database should we use now?"), set_id="b"), q1=["SQLite"])
    found = find_remembered(ask(mc("Which database should we use here?")), loose | close)
    assert found is not None and found.answers == {"q1": ["SQLite"]}


def test_each_cjk_character_is_a_term() -> None:
    assert terms("选择数据库") == {"选", "择", "数", "据", "库"}


def test_cjk_characters_split_latin_words() -> None:
    assert terms("使用PostgreSQL数据库") == {"使", "用", "postgresql", "数", "据", "库"}


def test_kana_and_hangul_are_single_terms() -> None:
    assert terms("データ와") == {"デ", "ー", "タ", "와"}


def test_latin_terms_need_two_characters_and_are_lowercased() -> None:
    assert terms("A b CD e2 x-ray") == {"cd", "e2", "ray"}


def test_a_cjk_question_reworded_is_answered_from_memory() -> None:
    decisions = remembered(ask(text_q("我们应该使用哪个数据库？")), q1=["PostgreSQL"])
    assert find_remembered(ask(text_q("我们应该用哪个数据库？")), decisions) is not None


def test_nothing_is_alike_when_a_side_has_no_terms() -> None:
    a = ask(mc("?", "X", ("A", "B")))
    assert similarity(a.questions, a.questions) == Similarity(
        shared_header=False, options=0.0, terms=0.0
    )


# --- what the model reads back ----------------------------------------------------------------


def test_the_answered_result_has_one_line_per_header_and_ends_with_the_decision_id() -> None:
    qs = ask(mc(), mc("What to collect?", "Signals", ("Logs", "Metrics"), multi_select=True))
    result = answered_result(
        qs, Answer(question_set_id=SET_ID, answers={"q1": ["SQLite"], "q2": ["Logs", "Metrics"]})
    )
    assert result.splitlines() == [
        "The user answered:",
        "- Database: SQLite",
        "- Signals: Logs; Metrics",
        "",
        f"decision_id: {qs.decision_id}",
    ]


def test_an_unanswered_optional_question_says_not_to_assume_a_choice() -> None:
    qs = ask(mc(), mc("Which cache?", "Cache", ("Redis", "None"), required=False))
    result = answered_result(qs, Answer(question_set_id=SET_ID, answers={"q1": ["SQLite"]}))
    assert "- Cache: left unanswered; do not assume any choice for it" in result


def test_free_text_is_shown_as_the_users_own_words() -> None:
    qs = ask(mc(), text_q("Name?", "Name"))
    result = answered_result(
        qs, Answer(question_set_id=SET_ID, answers={"q1": ["Other: DuckDB"], "q2": ['say "hi"']})
    )
    assert '- Database: Other, in the user\'s own words: "DuckDB"' in result
    assert '- Name: "say \\"hi\\""' in result


def test_repeated_headers_are_told_apart_by_question_id() -> None:
    qs = ask(mc(), mc("Which replica database?"))
    result = answered_result(
        qs, Answer(question_set_id=SET_ID, answers={"q1": ["SQLite"], "q2": ["PostgreSQL"]})
    )
    assert "- Database (q1): SQLite" in result and "- Database (q2): PostgreSQL" in result


def test_an_answered_result_for_a_dismissal_is_the_stop_instruction() -> None:
    qs = ask(mc())
    assert answered_result(qs, Answer(question_set_id=SET_ID)) == dismissed_result(qs)


def test_the_dismissed_result_says_stop_take_no_action_and_wait() -> None:
    result = dismissed_result(ask(mc()))
    assert "without choosing anything" in result
    assert "Do not choose an option, run a tool or delegate anything" in result
    assert "wait for the user's next message" in result
    assert "final_reply" in result


def test_the_cancelled_result_says_so_and_that_nothing_was_chosen() -> None:
    result = cancelled_result()
    assert "cancelled" in result and "Do not treat any option as chosen" in result


def test_the_result_for_a_cancelled_answer_is_the_cancelled_result() -> None:
    cancelled = Answer(question_set_id=SET_ID, status="cancelled")
    assert result_for_answer(ask(mc()), cancelled) == cancelled_result()


def test_the_timed_out_result_names_the_wait() -> None:
    assert "within 24 hours" in timed_out_result(24)
    assert "within 1 hour," in timed_out_result(1)
    assert "Do not treat any option as chosen" in timed_out_result(0.5)


def test_the_malformed_result_carries_the_error() -> None:
    result = malformed_result("q1: 'Maybe' is not an offered option")
    assert "could not be read (q1: 'Maybe' is not an offered option)" in result
    assert "Do not treat any option as chosen" in result


def test_the_headless_result_says_it_is_an_assumption_and_to_prefer_the_safest_option() -> None:
    result = headless_result(ask(mc()))
    assert "no user answered" in result
    assert "your own assumption, not the user's answer" in result
    assert "which assumption you made" in result
    assert "safest one that is easiest to undo" in result


def test_the_remembered_result_gives_the_choice_the_id_and_how_to_reopen() -> None:
    qs = ask(mc())
    decision = accepted_decision(qs, answer(q1=["SQLite"]))
    assert decision is not None
    result = remembered_result(decision)
    assert "already answered" in result
    assert "- Database: SQLite" in result
    assert f'decision_id "{qs.decision_id}" and new_evidence' in result


def test_the_pending_view_lists_questions_with_the_automatic_other() -> None:
    qs = ask(mc(multi_select=True), text_q("Anything else?", "Notes", required=False))
    view = json.loads(json.dumps(pending_view(qs)))["pending_question"]
    assert (view["id"], view["decision_id"]) == (SET_ID, qs.decision_id)
    first, second = view["questions"]
    assert [o["label"] for o in first["options"]] == ["PostgreSQL", "SQLite", "Other"]
    assert [o["free_text"] for o in first["options"]] == [False, False, True]
    assert (first["id"], first["type"], first["multi_select"], first["required"]) == (
        "q1",
        "multiple_choice",
        True,
        True,
    )
    assert (second["type"], second["options"], second["required"]) == ("text", [], False)


def test_the_pending_view_shows_what_a_reopening_question_reopens() -> None:
    qs = ask(mc(), decision_id="dec-aaaaaaaaaaaaaaaa", new_evidence="data grew")
    view = pending_view(qs)["pending_question"]
    assert view["reopens"] == {"decision_id": "dec-aaaaaaaaaaaaaaaa", "new_evidence": "data grew"}


# --- properties -------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
TEXTS = st.sampled_from(["Which one?", " Pick ", "选择哪个？", "", " ", "Other", "other: x"])
LABELS = st.sampled_from(["Fast", " fast", "Cheap", "Safe ", "Other", "", "平衡"])
OPTION_LIKE = st.fixed_dictionaries(
    {"label": LABELS}, optional={"description": TEXTS | JSON}
) | st.one_of(LABELS, JSON)
DISTINCT_OPTIONS = st.lists(
    st.sampled_from(["Fast", "Cheap", "Safe ", "平衡", "Other"]),
    min_size=2,
    max_size=5,
    unique=True,
).map(lambda labels: [{"label": label} for label in labels])
NEAR_VALID_QUESTION = st.fixed_dictionaries(
    {"question": st.sampled_from(["Which one?", " Pick ", "选择哪个？", "Other", " "])},
    optional={
        "header": TEXTS,
        "type": st.sampled_from(["multiple_choice", "text"]),
        "options": DISTINCT_OPTIONS | DISTINCT_OPTIONS | st.lists(OPTION_LIKE, max_size=6),
        "multi_select": st.booleans(),
        "required": st.booleans(),
    },
)
VALID_QUESTION = st.fixed_dictionaries(
    {
        "question": st.sampled_from(["Which one?", " Pick ", "选择哪个？"]),
        "options": DISTINCT_OPTIONS,
    },
    optional={"header": TEXTS, "multi_select": st.booleans(), "required": st.booleans()},
) | st.fixed_dictionaries(
    {"question": st.sampled_from(["Name?", " 名字？ "]), "type": st.just("text")},
    optional={"header": TEXTS, "required": st.booleans()},
)
QUESTION_LIKE = NEAR_VALID_QUESTION | st.fixed_dictionaries(
    {},
    optional={
        "question": TEXTS | JSON,
        "header": TEXTS | JSON,
        "type": st.sampled_from(["multiple_choice", "text", "yes_no"]) | JSON,
        "options": st.lists(OPTION_LIKE, max_size=6) | JSON,
        "multi_select": st.booleans() | JSON,
        "required": st.booleans() | JSON,
    },
)
FAST = settings(max_examples=200, deadline=None, database=None)


def _parse_or_control_error(arguments: str) -> QuestionSet | None:
    try:
        return parse_ask_user(ToolCall(id="c", name="ask_user", arguments=arguments), set_id=SET_ID)
    except ModelMistake:
        return None


@FAST
@given(JSON)
def test_parsing_any_json_raises_nothing_but_a_control_call_error(arguments: Any) -> None:
    _parse_or_control_error(json.dumps(arguments))


@FAST
@given(st.text(max_size=40))
def test_parsing_any_text_raises_nothing_but_a_control_call_error(arguments: str) -> None:
    _parse_or_control_error(arguments)


@FAST
@given(
    st.lists(VALID_QUESTION | NEAR_VALID_QUESTION, min_size=1, max_size=3)
    | st.lists(QUESTION_LIKE, max_size=4),
    st.booleans(),
    st.none() | TEXTS | JSON,
    st.none() | TEXTS | JSON,
)
def test_a_question_shaped_call_is_rejected_or_parsed_into_a_valid_set(
    questions: list[Any], as_string: bool, cited: Any, evidence: Any
) -> None:
    payload = {
        "questions": json.dumps(questions) if as_string else questions,
        "decision_id": cited,
        "new_evidence": evidence,
    }
    qs = _parse_or_control_error(json.dumps(payload))
    if qs is None:
        return
    assert 1 <= len(qs.questions) <= 3
    for q in qs.questions:
        assert q.question == q.question.strip() != ""
        labels = [label.casefold() for label in q.labels()]
        assert len(set(labels)) == len(labels) and "other" not in labels
        assert all(label == label.strip() != "" for label in q.labels())
        assert 2 <= len(labels) <= 4 if q.type == "multiple_choice" else labels == []


PENDING = ask(
    mc(),
    mc("What to collect?", "Signals", ("Logs", "Metrics", "Traces"), multi_select=True),
    text_q("Anything else?", "Notes", required=False),
)
CHOICES = st.sampled_from(
    ["PostgreSQL", " sqlite", "Logs", "metrics", "Other: x", "Other", "Other:", "", " ", "nope"]
)
ANSWER_LIKE = st.fixed_dictionaries(
    {"question_set_id": st.sampled_from([SET_ID, SET_ID, "old"])},
    optional={
        "status": st.sampled_from(["answered", "answered", "cancelled", "maybe"]) | JSON,
        "answers": st.dictionaries(
            st.sampled_from(["q1", "q2", "q3", "q4"]),
            st.lists(CHOICES, max_size=3) | CHOICES | JSON,
            max_size=4,
        )
        | JSON,
    },
)


@FAST
@given(ANSWER_LIKE | JSON)
def test_validating_any_answer_raises_nothing_but_an_answer_error(payload: Any) -> None:
    try:
        validate_answer(PENDING, payload)
    except AnswerRejected:
        pass


@FAST
@given(ANSWER_LIKE)
def test_a_cleaned_answer_is_accepted_unchanged(payload: Any) -> None:
    try:
        clean = clean_answer(PENDING, payload)
    except AnswerRejected:
        return
    assert clean_answer(PENDING, clean) == clean
    assert clean_answer(PENDING, clean.model_dump()) == clean


@FAST
@given(st.lists(st.sampled_from(["", " ", "\t", "\n"]), min_size=4, max_size=4), st.booleans())
def test_the_decision_id_ignores_any_padding_and_case(pads: list[str], upper: bool) -> None:
    def dress(text: str) -> str:
        return pads[0] + (text.upper() if upper else text) + pads[1]

    plain = ask(mc("Which database?", options=("PostgreSQL", "SQLite")))
    dressed = ask(
        mc(dress("Which database?"), options=(dress("PostgreSQL"), pads[2] + "SQLite" + pads[3]))
    )
    assert decision_id(plain) == decision_id(dressed)
