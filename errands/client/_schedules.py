"""Scheduled tasks (SPEC §11) through ``errands.Client``: add, list, show, pause, resume,
trigger and delete Temporal Schedules named ``errands-{NAME}``, each fire of which starts one
task (``workflows/_schedule.py``; ids in ``errands.contracts.schedules``).

A schedule belongs to the principal that made it (its ``ErrandsOwner``); acting as a principal,
someone else's is ``ScheduleNotFound``, exactly as a missing one; admins and the operator see
every one. Its fires' tasks are the owner's, in a new session per fire or in one named session
(claimed for the owner when the schedule is made, as a start claims it).

The catch-up window (default one hour, at least 10 s) is both Temporal's (fires the *server*
could not start in time are dropped) and the fire's own (a fire that first runs on a worker
later than that, after a worker outage, starts no task and is recorded ``missed``).
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from errands.adapters.webhooks import new_secret
from errands.agent.webhooks import targets_for
from errands.client._input import checked
from errands.client._notify import GivenTarget, forget_target, notify_urls, store_target
from errands.client._schedule_views import ScheduleView, view_of
from errands.contracts import search
from errands.contracts.notifications import NotifyTarget, stored_target_id, stored_target_ref
from errands.contracts.schedules import (
    DEFAULT_CATCHUP_SECONDS,
    MEMO,
    MIN_CATCHUP_SECONDS,
    NAME_PATTERN,
    Overlap,
    ScheduledTask,
    fire_action_id,
    fire_session_id,
    name_of,
    schedule_id,
)
from errands.errors import Conflict, InvalidRequest, ScheduleNotFound, TemporalUnreachable

if TYPE_CHECKING:
    from errands.client._client import Client

FIRE_WORKFLOW = "ScheduleFireWorkflow"
OVERLAPS: dict[str, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer-one": ScheduleOverlapPolicy.BUFFER_ONE,
    "allow-all": ScheduleOverlapPolicy.ALLOW_ALL,
    "cancel-previous": ScheduleOverlapPolicy.CANCEL_OTHER,
}
CRON_CHARS = 200
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


@dataclass(frozen=True)
class NewSchedule:
    """What ``add_schedule`` returns: the schedule, and the secret of each URL it notifies
    (shown once: errands keeps them only to sign with)."""

    name: str
    schedule_id: str
    notify_secrets: list[dict[str, str]]
    """``{"url", "ref", "secret"}`` per URL given."""

    def public(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "schedule_id": self.schedule_id,
            "notify_secrets": self.notify_secrets,
        }


def parse_duration(text: str, field: str = "every") -> timedelta:
    """``90s``, ``15m``, ``1h30m``, ``2d`` → a timedelta; ``InvalidRequest`` naming ``field``."""
    found = _DURATION.match(text.strip().lower())
    if not text.strip() or found is None or not any(found.groups()):
        raise InvalidRequest(
            f"{field} {text!r} is not a duration; write it as e.g. 90s, 15m, 1h30m or 1d",
            field=field,
        )
    d, h, m, s = (int(g or 0) for g in found.groups())
    return timedelta(days=d, hours=h, minutes=m, seconds=s)


def check_name(name: str) -> str:
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        raise InvalidRequest(
            f"schedule name {name!r} is not allowed: use 1 to 64 letters, digits, '-' or '_' "
            "(for example weekday-digest)",
            field="name",
        )
    return name


async def add_schedule(
    client: Client,
    name: str,
    text: str,
    *,
    cron: str | None = None,
    every: timedelta | None = None,
    timezone: str = "UTC",
    session: str | None = None,
    headless: bool = False,
    model: str | None = None,
    notify: str | list[str] | None = None,
    overlap: Overlap = "skip",
    catchup: timedelta = timedelta(seconds=DEFAULT_CATCHUP_SECONDS),
    paused: bool = False,
) -> NewSchedule:
    """Make schedule ``name``: ``cron`` (five fields, in ``timezone``) or ``every`` (an
    interval), each fire a task of ``text`` in ``session`` (None: a new session per fire).
    ``overlap``: what a fire does while the previous fire's task runs (default skip).
    ``catchup``: how late a fire may still start its task (at least 10 s). Acting as a
    principal: the schedule, its session and its tasks are theirs. ``InvalidRequest`` for bad
    input, ``Conflict`` when the name is taken."""
    from errands.client._client import task_input  # the client module imports this one

    check_name(name)
    spec = _spec(cron, every, timezone)
    if overlap not in OVERLAPS:
        raise InvalidRequest(
            f"overlap {overlap!r} is not one of {', '.join(OVERLAPS)}", field="overlap"
        )
    if catchup.total_seconds() < MIN_CATCHUP_SECONDS:
        raise InvalidRequest(
            f"the catch-up window is {catchup.total_seconds():g} s; Temporal's smallest is "
            f"{MIN_CATCHUP_SECONDS:g} s: give at least that",
            field="catchup",
        )
    probe = session or fire_session_id(name, datetime.now(UTC))
    task_input(client.settings, text, session=probe, model=model, headless=headless)
    urls = notify_urls(notify)
    acting = client.acting
    if session is not None:
        owner = await client._owner_of_new_task(session)
    else:
        owner = acting.id if acting is not None else None
    role = acting.role if acting is not None and acting.id == owner else None
    targets = targets_for(client.settings.webhook_table(), owner, role)
    if await _exists(client, name):
        raise _taken(name)  # before any secret is made for it
    given = await _store_targets(client, name, urls)
    task = ScheduledTask(
        name=name,
        text=text,
        session=session,
        headless=headless,
        model=model,
        owner=owner,
        owner_role=role,
        notify=targets + [NotifyTarget(ref=g["ref"]) for g in given],
        catchup_seconds=catchup.total_seconds(),
    )
    memo = {
        MEMO: {
            "text": text[:200],
            "session": session,
            "new_session": session is None,
            "headless": headless,
            "owner": owner,
            "cron": cron,
            "every_seconds": every.total_seconds() if every is not None else None,
            "timezone": timezone,
            "overlap": overlap,
            "catchup_seconds": catchup.total_seconds(),
        }
    }
    pairs: list[SearchAttributePair[Any]] = [SearchAttributePair(search.SCHEDULE, name)]
    if owner is not None:
        pairs.append(SearchAttributePair(search.OWNER, owner))
    attributes = TypedSearchAttributes(pairs)
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            FIRE_WORKFLOW,
            task,
            id=fire_action_id(name),
            task_queue=client.settings.task_queue,
            memo=memo,
            typed_search_attributes=attributes,
            static_summary=f"schedule {name}: {text[:150]}",
        ),
        spec=spec,
        policy=SchedulePolicy(overlap=OVERLAPS[overlap], catchup_window=catchup),
        state=ScheduleState(paused=paused, note="paused when added" if paused else None),
    )
    try:
        await client.temporal.create_schedule(
            schedule_id(name), schedule, memo=memo, search_attributes=attributes
        )
    except (ScheduleAlreadyRunningError, RPCError) as error:
        # No schedule carries the targets just stored: none of them is to be notified.
        for target in given:
            await forget_target(client, target["ref"], owner_id=_targets_owner(name))
        if isinstance(error, ScheduleAlreadyRunningError):
            raise _taken(name) from None
        raise _refused(error, name, cron=cron, timezone=timezone) from None
    return NewSchedule(name=name, schedule_id=schedule_id(name), notify_secrets=given)


def _taken(name: str) -> Conflict:
    return Conflict(
        f"a schedule named {name!r} exists already; delete it first "
        f"(errands schedule delete {name}) or choose another name"
    )


async def _exists(client: Client, name: str) -> bool:
    try:
        await client.temporal.get_schedule_handle(schedule_id(name)).describe()
    except RPCError as error:
        if _not_found(error):
            return False
        raise _refused(error, name) from None
    return True


def _spec(cron: str | None, every: timedelta | None, timezone: str) -> ScheduleSpec:
    if (cron is None) == (every is None):
        raise InvalidRequest(
            "give a schedule either cron (e.g. '0 8 * * 1-5') or every (e.g. 1h), not both "
            "and not neither",
            field="cron",
        )
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidRequest(
            f"timezone {timezone!r} is not a known time zone; give an IANA name such as "
            "Europe/Lisbon or UTC",
            field="timezone",
        ) from None
    if cron is not None:
        checked(cron, "cron", CRON_CHARS, what="the cron expression")
        return ScheduleSpec(cron_expressions=[cron.strip()], time_zone_name=timezone)
    assert every is not None
    if every.total_seconds() < 1:
        raise InvalidRequest("every must be at least 1 s (e.g. 15m)", field="every")
    return ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)], time_zone_name=timezone)


def _refused(
    error: RPCError, name: str, *, cron: str | None = None, timezone: str | None = None
) -> Exception:
    """Temporal's refusal of a call about schedule ``name``, as errands' error."""
    if _not_found(error):
        return _missing(name)
    if error.status == RPCStatusCode.INVALID_ARGUMENT:
        field = "timezone" if "time zone" in error.message else "cron" if cron else None
        return InvalidRequest(
            f"Temporal refused schedule {name!r}: {error.message}; fix "
            f"{'the timezone' if field == 'timezone' else 'the cron expression'} and add it again",
            field=field,
        )
    if error.status == RPCStatusCode.ALREADY_EXISTS:
        return Conflict(f"a schedule named {name!r} exists already: {error.message}")
    return TemporalUnreachable(
        f"Temporal could not be reached about schedule {name!r}: {error.message}"
    )


def _not_found(error: RPCError) -> bool:
    """Temporal's answer about a schedule that does not exist (the dev server words some of
    them as its scheduler workflow's)."""
    return error.status == RPCStatusCode.NOT_FOUND or "temporal-sys-scheduler:" in error.message


def _missing(name: str) -> ScheduleNotFound:
    return ScheduleNotFound(
        f"no schedule {name!r} of yours; check the name (errands schedule list shows yours)"
    )


def _targets_owner(name: str) -> str:
    """Whose the targets of schedule ``name`` are in the store."""
    return f"schedule:{name}"


async def _store_targets(client: Client, name: str, urls: list[str]) -> list[dict[str, str]]:
    """Each URL with a fresh secret, kept in the store under the schedule (``schedule:NAME``),
    numbered after any an earlier schedule of that name kept (those stay as they were)."""
    owner = _targets_owner(name)
    k, given = 1, []
    for url in urls:
        while await client._store_call("get", stored_target_id(stored_target_ref(owner, k))[1]):
            k += 1
        target = GivenTarget(url=url, ref=stored_target_ref(owner, k), secret=new_secret())
        await store_target(client, target, owner_id=owner)
        given.append({"url": url, "ref": target.ref, "secret": target.secret})
        k += 1
    return given


async def _owned(client: Client, name: str) -> tuple[ScheduleHandle, ScheduleDescription]:
    """The schedule ``name`` and its description, if the acting principal may see it."""
    check_name(name)
    handle = client.temporal.get_schedule_handle(schedule_id(name))
    try:
        described = await handle.describe()
    except RPCError as error:
        raise _refused(error, name) from None
    principal = client.acting
    owner = described.typed_search_attributes.get(search.OWNER)
    if principal is not None and not principal.is_admin and owner != principal.id:
        raise _missing(name)
    return handle, described


async def list_schedules(client: Client, *, limit: int = 200) -> list[ScheduleView]:
    """The schedules the acting principal owns (admins and the operator: every one), by name;
    their recent fires are left out (``show_schedule`` gives them)."""
    principal = client.acting
    query = None
    if principal is not None and not principal.is_admin:
        query = search.owner_filter(principal.id)
    found: list[ScheduleView] = []
    try:
        async for entry in await client.temporal.list_schedules(query=query):
            name = name_of(entry.id)
            if name is None:
                continue
            try:
                described = await client.temporal.get_schedule_handle(entry.id).describe()
            except RPCError:
                continue  # deleted meanwhile
            found.append(await view_of(client, name, described, fires=False))
            if len(found) >= limit:
                break
    except RPCError as error:
        raise TemporalUnreachable(
            f"Temporal could not list the schedules of namespace {client.namespace}: "
            f"{error.message}"
        ) from None
    return sorted(found, key=lambda view: view.name)


async def show_schedule(client: Client, name: str) -> ScheduleView:
    """Schedule ``name``: its spec, state, next fires and recent fires, each with its task id
    and the task's outcome."""
    _, described = await _owned(client, name)
    return await view_of(client, name, described, fires=True)


async def pause_schedule(client: Client, name: str, note: str | None = None) -> None:
    """No fire until ``resume_schedule`` (a fire Temporal buffered already still starts)."""
    handle, _ = await _owned(client, name)
    await _call(handle.pause(note=note or "paused with errands"), name)


async def resume_schedule(client: Client, name: str) -> None:
    handle, _ = await _owned(client, name)
    await _call(handle.unpause(note="resumed with errands"), name)


async def trigger_schedule(client: Client, name: str, overlap: Overlap | None = None) -> None:
    """One fire now, paused or not, under the schedule's overlap policy (or ``overlap``)."""
    handle, _ = await _owned(client, name)
    policy = OVERLAPS[overlap] if overlap is not None else None
    await _call(handle.trigger(overlap=policy), name)


async def delete_schedule(client: Client, name: str) -> None:
    """No more fires; tasks already started run on."""
    handle, _ = await _owned(client, name)
    await _call(handle.delete(), name)


async def _call(call: Any, name: str) -> None:
    try:
        await call
    except RPCError as error:
        raise _refused(error, name) from None


class ScheduleCalls:
    """``errands.Client``'s schedule methods (a base class of it): each the function of the same
    name above, acting as the client's principal."""

    async def add_schedule(self, name: str, text: str, **options: Any) -> NewSchedule:
        return await add_schedule(self._me(), name, text, **options)

    async def schedules(self) -> list[ScheduleView]:
        return await list_schedules(self._me())

    async def schedule(self, name: str) -> ScheduleView:
        return await show_schedule(self._me(), name)

    async def pause_schedule(self, name: str, note: str | None = None) -> None:
        await pause_schedule(self._me(), name, note)

    async def resume_schedule(self, name: str) -> None:
        await resume_schedule(self._me(), name)

    async def trigger_schedule(self, name: str, overlap: Overlap | None = None) -> None:
        await trigger_schedule(self._me(), name, overlap)

    async def delete_schedule(self, name: str) -> None:
        await delete_schedule(self._me(), name)

    def _me(self) -> Client:
        return self  # type: ignore[return-value]  # mixed into Client only
