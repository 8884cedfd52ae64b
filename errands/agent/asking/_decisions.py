"""Decision memory, the pure part: what an accepted answer is remembered as, and whether a new
question set is one the user has already answered (same content, or the same ambiguity in
other words). Storing the records is the workflow's business; this module only reads them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from errands.agent.asking._answers import clean_answer, is_dismissal
from errands.agent.asking._results import answer_lines
from errands.contracts.asking import Answer, Question, QuestionSet, RememberedAnswer
from errands.errors import ModelMistake

SHARED_HEADER_OPTIONS = 0.5
SHARED_HEADER_TERMS = 0.45
OPTIONS_STRONG = 0.75
OPTIONS_STRONG_TERMS = 0.35
TERMS_ALONE = 0.7

_CJK_RANGES = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3130, 0x318F),  # Hangul Compatibility Jamo
    (0x31F0, 0x31FF),  # Katakana Phonetic Extensions
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7AF),  # Hangul Syllables
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0xFF66, 0xFF9D),  # Halfwidth Katakana
    (0x20000, 0x3134F),  # CJK Extensions B to G
)


class Similarity(BaseModel):
    """How alike two question sets are: the SPEC §2 Jaccard measures and its verdict."""

    shared_header: bool
    options: float
    terms: float

    @property
    def same_ambiguity(self) -> bool:
        return (
            (
                self.shared_header
                and (self.options >= SHARED_HEADER_OPTIONS or self.terms >= SHARED_HEADER_TERMS)
            )
            or (self.options >= OPTIONS_STRONG and self.terms >= OPTIONS_STRONG_TERMS)
            or self.terms >= TERMS_ALONE
        )


def accepted_decision(
    qs: QuestionSet, answer: Answer | Mapping[str, Any]
) -> RememberedAnswer | None:
    """What to remember for this answer, or None: a cancel or a dismissal decides nothing.

    Raises ``AnswerRejected`` for an answer that ``validate_answer`` would reject."""
    clean = clean_answer(qs, answer)
    if clean.status != "answered" or is_dismissal(clean):
        return None
    return RememberedAnswer(
        decision_id=qs.decision_id,
        question_set=qs,
        answers=clean.answers,
        summary="\n".join(answer_lines(qs, clean.answers)),
    )


def check_citation(
    qs: QuestionSet, decisions: Mapping[str, RememberedAnswer | Mapping[str, Any]]
) -> None:
    """Reject a cited decision id the session does not know, when it knows some."""
    cited = qs.cited_decision_id
    records = _records(decisions)
    if not cited or not records or cited in records:
        return
    known = "; ".join(f"{d.decision_id} ({', '.join(d.headers)})" for d in records.values())
    raise ModelMistake(
        f"ask_user: decision_id {cited!r} is not a decision of this session. Its decisions are: "
        f"{known}. To reopen one, cite its exact decision_id with new_evidence; to ask "
        "something new, leave decision_id out."
    )


def find_remembered(
    qs: QuestionSet, decisions: Mapping[str, RememberedAnswer | Mapping[str, Any]]
) -> RememberedAnswer | None:
    """The remembered decision that answers ``qs`` instead of asking the user, if any.

    Run ``check_citation`` first. A call that cites a decision with new evidence is asked again.
    Otherwise the record under ``qs.decision_id`` wins; a call citing an id is matched by that id
    only; an uncited call is matched by similarity, the most alike record first (terms, then
    options; earlier records win ties)."""
    if qs.reopens:
        return None
    records = _records(decisions)
    exact = records.get(qs.decision_id)
    if exact is not None or qs.cited_decision_id:
        return exact
    best: tuple[tuple[float, float], RememberedAnswer] | None = None
    for record in records.values():
        alike = similarity(qs.questions, record.question_set.questions)
        score = (alike.terms, alike.options)
        if alike.same_ambiguity and (best is None or score > best[0]):
            best = (score, record)
    return best[1] if best else None


def similarity(left: Iterable[Question], right: Iterable[Question]) -> Similarity:
    """Headers and option labels compare as whole phrases (lower-cased, letters and digits
    only); terms are the words of the headers, prompts and labels (see ``terms``). A derived
    header (the model gave none) is left out of both. With no terms on a side, nothing is alike."""
    a, b = _features(left), _features(right)
    if not a[2] or not b[2]:
        return Similarity(shared_header=False, options=0.0, terms=0.0)
    return Similarity(
        shared_header=bool(a[0] & b[0]), options=_jaccard(a[1], b[1]), terms=_jaccard(a[2], b[2])
    )


def terms(text: str) -> set[str]:
    """Lower-cased words of two or more letters or digits; every CJK character is a term."""
    out: set[str] = set()
    word: list[str] = []

    def flush() -> None:
        if len(word) >= 2:
            out.add("".join(word))
        word.clear()

    for char in text.lower():
        if _is_cjk(char):
            flush()
            out.add(char)
        elif char.isalnum():
            word.append(char)
        else:
            flush()
    flush()
    return out


def _features(questions: Iterable[Question]) -> tuple[set[str], set[str], set[str]]:
    headers: set[str] = set()
    options: set[str] = set()
    words: set[str] = set()
    for q in questions:
        if not q.header_derived:
            headers |= _phrase(q.header)
            words |= terms(q.header)
        words |= terms(q.question)
        for label in q.labels():
            options |= _phrase(label)
            words |= terms(label)
    return headers, options, words


def _phrase(text: str) -> set[str]:
    key = "".join(char for char in text.lower() if char.isalnum())
    return {key} if key else set()


def _jaccard(a: set[str], b: set[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _is_cjk(char: str) -> bool:
    point = ord(char)
    return any(low <= point <= high for low, high in _CJK_RANGES)


def _records(
    decisions: Mapping[str, RememberedAnswer | Mapping[str, Any]],
) -> dict[str, RememberedAnswer]:
    """Remembered decisions keyed by id. A record that does not validate, or that holds no
    choice at all, cannot answer anything and is skipped rather than failing the workflow."""
    out: dict[str, RememberedAnswer] = {}
    for key, raw in decisions.items():
        try:
            record = (
                raw if isinstance(raw, RememberedAnswer) else RememberedAnswer.model_validate(raw)
            )
        except ValidationError:
            continue
        if any(value.strip() for values in record.answers.values() for value in values):
            out[key] = record
    return out
