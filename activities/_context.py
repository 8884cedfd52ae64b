"""Fitting a round's request into its model's window (SPEC §7), inside the activity that sends it.

A round's view of the session starts at the latest compaction summary that precedes what the
round may see: the summary, then the rows after the stretch it covers, read from there (so a
round's cost follows the window, not the session's length). When the request would pass
``COMPACT_AT`` of the input budget, the oldest part of the view is summarised by the same model,
without tools, into a new summary row under a deterministic id (the session and the last
position it covers), and the request is built again from it. A stretch too long for one summary
call is folded in window-sized pieces, oldest first, each piece's summary stored as it is made,
so a retried attempt picks up where the last one stopped and no summary is written twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._heartbeats import model_timeout
from errands.adapters.routing import ModelRouter
from errands.adapters.store import SessionStore, store_work
from errands.agent import context, prompts, reading
from errands.contracts import ids
from errands.contracts.messages import (
    DeltaSink,
    Message,
    MessageKind,
    ModelRequest,
    ModelResponse,
    ModelUsage,
    NewMessage,
    StoredMessage,
)
from errands.contracts.rounds import RoundView
from errands.contracts.rows import SummaryMeta

SUMMARY_KIND: MessageKind = "summary"


@dataclass(frozen=True)
class SessionView:
    """What a round may see of a session: the summary it starts from and the rows after it."""

    session_id: str
    summary: StoredMessage | None
    rows: list[StoredMessage]
    shown_bytes: int = 0
    """What the summary and the rows weigh in the request built from them (as rendered, with
    any previews): the part a compaction replaces. Set by the request's builder."""


def covered_upto(summary: StoredMessage) -> int:
    """The last seq a summary folds in."""
    return SummaryMeta.of(summary).covers[1]


def session_view(
    store: SessionStore,
    session_id: str,
    upto_seq: int | None,
    pinned: RoundView | None = None,
) -> SessionView:
    """The summary a round renders from and the rows after it (summaries themselves are never
    among the rows). ``pinned``: the summary a step already rendered from; otherwise the
    latest one covering no more than ``upto_seq``. Blocking."""
    summary: StoredMessage | None
    if pinned is not None:
        summary = store.get(pinned.summary_id) if pinned.summary_id else None
    else:
        summaries = [
            s
            for s in store.list_kind(session_id, SUMMARY_KIND)
            if upto_seq is None or covered_upto(s) <= upto_seq
        ]
        summary = max(summaries, key=covered_upto, default=None)
    after = covered_upto(summary) if summary else 0
    rows = store.list_session(session_id, upto_seq=upto_seq, after_seq=after)
    return SessionView(session_id, summary, [r for r in rows if r.kind != SUMMARY_KIND])


ResultLimit = Callable[[int], int]
"""The most bytes one tool result may take in a request that reserves the given output tokens
(``errands.agent.context.result_bytes`` on the request's model)."""
Built = tuple[ModelRequest, int, SessionView]
Build = Callable[[int, ResultLimit], Built]
"""Builds the request from the store as it is now, bulky outputs as previews to the level
asked (``errands.agent.reading``) and the round's own tool results within the limit (blocking):
the request, its catalog's size, and the view of the session it rendered."""
Logger = Callable[[StoredMessage], None]
"""Told of a stored summary row."""


class ContextFitter:
    """Builds requests that fit, compacting the session they render when they would not. One
    per worker; each activity attempt gets its own ``Fitting``."""

    def __init__(self, store: SessionStore, router: ModelRouter) -> None:
        self._store = store
        self._router = router

    @property
    def store(self) -> SessionStore:
        return self._store

    def fitting(
        self, model: str, build: Build, *, compact: bool = True, log: Logger | None = None
    ) -> Fitting:
        """``compact`` False: previews only, for requests that share a round's prefix (side
        questions, the advisor), so they render what the round rendered and write nothing.
        ``log`` hears of each summary row stored (for the event log). Blocking ``log``."""
        return Fitting(self, model, build, compact, log=log)

    def result_limit(self, model: str) -> ResultLimit:
        """How many bytes one tool result may take in a request to ``model``, by the output
        tokens the request reserves: ``ERRANDS_TOOL_RESULT_PERCENT`` of its input budget."""
        info = self._router.model_info(model)
        percent = self._router.settings.tool_result_percent
        return lambda max_output_tokens: context.result_bytes(info, max_output_tokens, percent)

    def budget(self, model: str, request: ModelRequest, window: int | None = None) -> int:
        """``request``'s input budget on ``model``: its catalog window, or the smaller
        ``window`` a provider said it has."""
        info = self._router.model_info(model)
        if window is not None and window < info.context_window:
            info = info.model_copy(update={"context_window": window})
        return context.input_budget(info, request.max_output_tokens)

    def over(self, model: str, request: ModelRequest, budget: int) -> bool:
        """Whether ``request`` passes the compaction trigger of ``budget``."""
        estimate = self._router.estimator.tokens(model, context.request_bytes(request))
        return estimate > context.COMPACT_AT * budget

    def refused(self, model: str, request: ModelRequest, refusal: str, budget: int) -> None:
        """The provider refused ``request`` as too long: estimate its kind higher from now on."""
        size = context.request_bytes(request)
        self._router.estimator.shrink(model, size, budget, context.counted_tokens(refusal))

    async def compact(
        self,
        model: str,
        request: ModelRequest,
        view: SessionView,
        budget: int,
        spent: ModelUsage,
        window: int | None = None,
        log: Logger | None = None,
    ) -> str | None:
        """Fold the oldest part of ``view`` (what ``request`` rendered) into a new summary:
        None once it is stored, else why no summary could be made (worth another try);
        ``context`` when nothing can be. ``window``: as in ``budget``."""
        estimator = self._router.estimator
        # What stays whatever is folded: the request less its summary and rows as rendered.
        fixed = context.request_bytes(request) - view.shown_bytes
        keep = context.kept_tokens(budget, estimator.tokens(model, max(0, fixed)))
        cut = context.compaction_cut(view.rows, int(keep * estimator.ratio(model)))
        if cut == 0:
            raise self.context_failure(model, "there is nothing older left to summarise")
        info = self._router.model_info(model)
        if window is not None and window < info.context_window:
            info = info.model_copy(update={"context_window": window})
        # An eighth of a small window: the summary and a piece must fit one call together.
        output = min(context.SUMMARY_OUTPUT, info.max_output, info.context_window // 8)
        # Each call holds the instructions, the running summary (at most `output` tokens) and
        # one piece of the stretch being folded in.
        overhead = estimator.tokens(model, len(prompts.SUMMARY_INSTRUCTIONS) + 512)
        piece_tokens = context.input_budget(info, output) - overhead - output
        if piece_tokens <= 0:
            raise self.context_failure(model, "its window cannot hold a summary call")
        piece_bytes = int(piece_tokens * estimator.ratio(model))
        previous = view.summary
        for piece in context.pieces(view.rows[:cut], piece_bytes):
            folded = await self._fold(
                model, view.session_id, previous, piece, output, piece_bytes, spent
            )
            if isinstance(folded, str):
                return folded
            if log is not None:
                await store_work(self._store, log, folded)
            previous = folded
            activity.heartbeat()
        return None

    async def _fold(
        self,
        model: str,
        session_id: str,
        previous: StoredMessage | None,
        piece: list[StoredMessage],
        output: int,
        piece_bytes: int,
        spent: ModelUsage,
    ) -> StoredMessage | str:
        """``previous`` with ``piece`` folded in, stored; or why the summary call failed."""
        row_id = ids.summary_id(session_id, piece[-1].seq)
        stored = await store_work(self._store, self._store.get, row_id)
        if stored is not None:  # made by an attempt that died after writing it
            return stored
        # A row bigger than a piece is a piece of its own, cut down to fit the call beside the
        # running summary.
        room = piece_bytes - (len(previous.text.encode()) if previous else 0)
        text = prompts.summary_request_text(
            previous.text if previous else None, transcript(piece, max(1_000, room))
        )
        request = ModelRequest(
            system=prompts.SUMMARY_INSTRUCTIONS,
            messages=[Message(role="user", text=text)],
            tools=[],
            tool_choice="none",
            max_output_tokens=output,
        )
        try:
            response = await self._router.complete(model, request, timeout=model_timeout())
        except ApplicationError as error:
            if error.type != "context":
                raise
            self.refused(model, request, error.message, self.budget(model, request))
            return f"the summary call itself was refused as too long ({error.message})"
        spent.add(ModelUsage.of(response.usage))
        summary = response.text.strip()
        if not summary:
            return "the summary call returned no text"
        if response.finish_reason in ("length", "max_tokens"):
            return f"the summary did not fit its {output} output tokens"
        first = SummaryMeta.of(previous).covers[0] if previous else piece[0].seq
        return await store_work(
            self._store,
            self._store.append_once,
            NewMessage(
                id=row_id,
                session_id=session_id,
                role="system",  # errands' own words, not the user's
                kind=SUMMARY_KIND,
                text=summary,
                meta=SummaryMeta(
                    covers=[first, piece[-1].seq], model=model, usage=response.usage
                ).stored(),
            ),
        )

    def context_failure(self, model: str, what: str) -> ApplicationError:
        window = self._router.model_info(model).context_window
        return ApplicationError(
            f"the conversation does not fit {model}'s context window of {window:,} tokens: "
            f"{what}; if the model takes more, set its context_window in ERRANDS_MODELS, or "
            "use a model with a larger window, or start a new session",
            {"model": model, "context_window": window},
            type="context",
            non_retryable=True,
        )


def transcript(rows: list[StoredMessage], row_limit: int) -> str:
    """Rows as plain text for a summary call, each cut to ``row_limit`` characters."""
    lines = []
    for row in rows:
        text = (
            row.text
            if len(row.text) <= row_limit
            else (f"{row.text[:row_limit]}\n… ({len(row.text) - row_limit:,} more characters)")
        )
        if row.kind == "summary" or not text.strip():
            continue
        who = {"user": "User", "assistant": "Assistant", "tool": "Result"}.get(row.role, row.role)
        what = f" [{row.kind}, task {row.task_id}]" if row.kind in ("branch", "ack") else ""
        lines.append(f"{who}{what}: {text}")
    return "\n\n".join(lines)


@dataclass
class Fitting:
    """One activity attempt's way to a request that fits: it compacts while the request is
    over the trigger, and once more each time the provider refuses it as too long (taking the
    window the provider states, when it states a smaller one than the catalog's); after
    ``MAX_COMPACTIONS`` compactions in the attempt it fails the call as ``context``."""

    fitter: ContextFitter
    model: str
    build: Build
    may_compact: bool = True
    previews: int = reading.NONE
    """Which bulky outputs render as previews: the first, cheapest way to fit."""
    spent: ModelUsage = field(default_factory=ModelUsage)
    """The summary calls made (the ledger's ``compaction``)."""
    compactions: int = 0
    problem: str = ""
    """Why the last compaction did not help."""
    window: int | None = None
    """The window a provider's refusal stated, when smaller than the catalog's."""
    refusals: int = 0
    request: ModelRequest | None = None
    view: SessionView | None = None
    log: Logger | None = None
    """Hears of each summary row stored."""
    ready: Built | None = None
    """The first request, built by ``prepare`` with the step's other store work."""

    def prepare(self) -> None:
        """Build the first request now (blocking): a step that has other store work to do
        before its call builds it in the same store work; ``fit`` takes it
        instead of building it again."""
        self.ready = self.build(self.previews, self.fitter.result_limit(self.model))

    async def fit(self) -> tuple[ModelRequest, int]:
        """The request, and its catalog's size, once it fits."""
        compact_now = self.refusals > self.compactions  # a refusal since the last compaction
        while True:
            built, self.ready = self.ready, None
            if built is None:
                limit = self.fitter.result_limit(self.model)
                built = await store_work(self.fitter.store, self.build, self.previews, limit)
            request, catalog_size, view = built
            self.request, self.view = request, view
            budget = self.fitter.budget(self.model, request, self.window)
            over = self.fitter.over(self.model, request, budget)
            if not over and not compact_now:
                return request, catalog_size
            if over and self.previews < reading.ALL:
                self.previews += 1
                continue
            if not self.may_compact:
                return request, catalog_size  # as the round sent it
            if self.compactions >= context.MAX_COMPACTIONS:
                raise self.fitter.context_failure(
                    self.model,
                    f"{self.compactions} compactions did not make it fit"
                    + (f" (the last: {self.problem})" if self.problem else ""),
                )
            self.compactions += 1
            compact_now = False
            self.problem = (
                await self.fitter.compact(
                    self.model, request, view, budget, self.spent, self.window, self.log
                )
                or "the request was still too long after it"
            )

    async def complete(
        self, router: ModelRouter, on_delta: DeltaSink | None = None
    ) -> tuple[ModelResponse, int]:
        """Fit the request and send it (streamed through ``on_delta``, if given); a refusal as
        too long compacts and sends again (at most ``MAX_COMPACTIONS`` compactions in all).
        The response, and the catalog's size."""
        while True:
            request, catalog_size = await self.fit()
            try:
                response = await router.complete(
                    self.model, request, timeout=model_timeout(), on_delta=on_delta
                )
            except ApplicationError as error:
                if error.type != "context":
                    raise
                self.refused(error)  # the next fit compacts
                continue
            return response, catalog_size

    def refused(self, error: ApplicationError) -> None:
        """The provider refused the last request as too long: estimate such requests higher,
        and make the next ``fit`` compact."""
        assert self.request is not None
        self.problem = error.message
        self.refusals = self.compactions + 1
        stated = context.stated_window(error.message)
        if stated is not None:
            self.window = min(stated, self.window or stated)
        budget = self.fitter.budget(self.model, self.request, self.window)
        self.fitter.refused(self.model, self.request, error.message, budget)

    def pinned(self) -> RoundView:
        """What the last request rendered, to pin on the round."""
        summary = self.view.summary if self.view is not None else None
        return RoundView(summary_id=summary.id if summary else None, previews=self.previews)
