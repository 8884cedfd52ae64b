"""Model calls beside the round: the advisor (a work tool of the main agent) and side questions.

Neither writes anything: the advisor's answer becomes a tool result in the round's own messages,
and a side question's answer goes back to whoever asked it, never into the session.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._context import ContextFitter, ResultLimit, SessionView
from activities._events import preview, record
from activities._heartbeats import heartbeating, model_timeout
from activities._requests import round_request
from activities._rounds import RoundRecords
from activities._tools import MAIN, McpTools
from errands.adapters.routing import ModelRouter
from errands.adapters.store import SessionStore, store_work
from errands.agent import side_questions
from errands.agent.advisor import advice_result, advisor_request
from errands.agent.reading import NONE
from errands.agent.subtask_types import SubtaskType, WorkTool
from errands.contracts.activities import AdvisorInput, AdvisorOutput, SideAnswer, SideQuestionInput
from errands.contracts.messages import Message, ModelRequest, ModelUsage, Usage
from errands.contracts.rounds import RoundStepInput


class ConsultActivities:
    def __init__(
        self,
        store: SessionStore,
        router: ModelRouter,
        types: dict[str, SubtaskType],
        main_tools: Sequence[WorkTool] = (),
        mcp: McpTools | None = None,
    ) -> None:
        self._store = store
        self._router = router
        self._types = types
        self._main_tools = list(main_tools)
        self._pinned = mcp.nothing_for(MAIN) if mcp is not None else None
        """The list the requests render when no server serves the main agent, as the round's
        step renders it (``McpTools.nothing_for``); None: the task's, read from the store."""
        self._fitter = ContextFitter(store, router)
        self._rounds = RoundRecords(store, types, router.settings)

    def _build(
        self, step: RoundStepInput, previews: int = NONE, limit: ResultLimit | None = None
    ) -> tuple[ModelRequest, int, SessionView]:
        limit = limit or self._fitter.result_limit(step.model)  # the round's model: its limit
        return round_request(
            self._store, self._types, step, previews, self._main_tools, limit, self._pinned
        )

    async def _round_request(self, step: RoundStepInput) -> ModelRequest:
        """The round's request as the round rendered it: from the same summary, with the same
        previews, compacting nothing (for a step from before views were pinned, the previews
        are decided again on the round's model). A step still preparing its round renders as
        it will once prepared."""
        step = await store_work(self._store, self._rounds.in_flight, step)
        if step.view is not None:
            request, _, _ = await store_work(self._store, self._build, step)
            return request
        fitting = self._fitter.fitting(
            step.model, lambda previews, limit: self._build(step, previews, limit), compact=False
        )
        request, _ = await fitting.fit()
        return request

    @activity.defn(name="consult_advisor")
    async def consult_advisor(self, data: AdvisorInput) -> AdvisorOutput:
        """One nested call, no tools: the round's own context, trimmed, then the question."""
        return await heartbeating(self._consult_advisor(data))

    async def _consult_advisor(self, data: AdvisorInput) -> AdvisorOutput:
        request = await self._round_request(data.round)
        nested = advisor_request([request.system], request.messages, data.question)
        response = await self._router.complete(data.model, nested, timeout=model_timeout())
        return AdvisorOutput(
            result=advice_result(data.model, response.text, uses=data.uses, limit=data.limit),
            usage=response.usage,
            model=data.model,
            attempt=activity.info().attempt,
        )

    @activity.defn(name="answer_side_question")
    async def answer_side_question(self, data: SideQuestionInput) -> SideAnswer:
        """The preferred path, the fallback, or both in turn (``data.path``)."""
        info = activity.info()
        cause = f"side:{info.workflow_id}:{info.workflow_run_id}:{info.activity_id}"
        if data.path != "fallback":  # the first (or only) activity of the question
            await store_work(
                self._store,
                record,
                self._store,
                data.task_id,
                f"{cause}:asked",
                "side_question_asked",
                cause,
                question=preview(data.question),
            )
        answer = await heartbeating(self._answer_side_question(data))
        if answer.answer:
            await store_work(
                self._store,
                record,
                self._store,
                data.task_id,
                f"{cause}:answered",
                "side_question_answered",
                cause,
                answer=preview(answer.answer),
                model=answer.model,
            )
        return answer

    async def _answer_side_question(self, data: SideQuestionInput) -> SideAnswer:
        try:
            question = side_questions.validate_side_question(data.question)
        except ValueError as error:
            raise ApplicationError(str(error), type="invalid_request", non_retryable=True) from None
        usage: dict[str, ModelUsage] = {}
        messages: list[Message] = []
        if data.round is not None:
            request = await self._round_request(data.round)
            messages = request.messages
            if data.path != "fallback" and data.model == data.round.model:
                answer = await self._preferred(data.model, request, question, usage)
                if answer:
                    return SideAnswer(
                        answer=answer, path="preferred", model=data.model, usage=usage
                    )
        if data.path == "preferred":
            return SideAnswer(answer="", path="preferred", model=data.model, usage=usage)
        fallback = side_questions.fallback_request(messages, question)
        response = await self._call(data.model, fallback, usage)
        if not response.strip():
            raise ApplicationError(
                "the side-question model returned an empty answer; ask again",
                type="transient",
            )
        return SideAnswer(answer=response.strip(), path="fallback", model=data.model, usage=usage)

    async def _preferred(
        self, model: str, request: ModelRequest, question: str, usage: dict[str, ModelUsage]
    ) -> str | None:
        """Replay the round's exact prefix; refuse any tool call and ask again, a few times."""
        summary = side_questions.in_progress_summary(request.messages)
        side = side_questions.preferred_request(request, question, summary)
        for _ in range(side_questions.MAX_SIDE_ITERATIONS):
            try:
                response = await self._router.complete(model, side, timeout=model_timeout())
            except ApplicationError as error:
                if error.non_retryable and error.type != "invalid_request":
                    raise
                activity.logger.warning("side question: preferred path failed: %s", error)
                return None
            _charge(usage, model, response.usage)
            if not response.tool_calls:
                return response.text.strip() or None
            side = side.model_copy(
                update={
                    "messages": side.messages
                    + side_questions.refusal_messages(response.text, response.tool_calls)
                }
            )
        return None

    async def _call(self, model: str, request: ModelRequest, usage: dict[str, ModelUsage]) -> str:
        response = await self._router.complete(model, request, timeout=model_timeout())
        _charge(usage, model, response.usage)
        return response.text


def _charge(usage: dict[str, ModelUsage], model: str, spent: Usage) -> None:
    usage.setdefault(model, ModelUsage()).add(ModelUsage.of(spent))
