"""Observability for workers and the gateway: log lines that carry task, round and branch ids,
the SDK's Prometheus endpoint, and OpenTelemetry tracing when that extra is installed.

Nothing here runs at import time: ``worker.py`` and the CLI call these once, at process start,
with values from Settings (``ERRANDS_LOG_LEVEL``, ``ERRANDS_LOG_JSON``, ``ERRANDS_METRICS_BIND``,
``ERRANDS_OTEL``). Workflows never import this module.
"""

from __future__ import annotations

import contextvars
import importlib
import json as jsonlib
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

from temporalio import activity, workflow
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

ID_FIELDS = ("task_id", "round", "branch")
"""The ids every log line carries when it is written on behalf of a task."""

_log = logging.getLogger("errands.telemetry")
_CHILD_PART = re.compile(r"^(?:r(?P<round>\d+)|b(?P<branch>\d+))$")
_HANDLER_MARK = "_errands_handler"

# Set around each activity by LogContextInterceptor: the round and branch its input names,
# which the workflow id of a task's own activities does not carry.
_activity_ids: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar(
    "errands_activity_ids", default=None
)


def ids_from_workflow_id(workflow_id: str) -> dict[str, Any]:
    """``task-s-1a2b3c`` names a task; a branch child ``task-s-1a2b3c/r2/b1`` adds round 2 and
    branch 1; anything else after a ``/`` (a side question's ``btw-…``) still names its task."""
    head, *rest = workflow_id.split("/")
    ids: dict[str, Any] = {"task_id": head}
    for part in rest:
        match = _CHILD_PART.match(part)
        if match is None:
            continue
        if match["round"] is not None:
            ids["round"] = int(match["round"])
        else:
            ids["branch"] = int(match["branch"])
    return ids


def _int_field(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ids_from_input(arg: object) -> dict[str, int]:
    ids: dict[str, int] = {}
    round_ = getattr(arg, "round", None)
    # The advisor and side-question inputs carry the round's whole step input, not its number.
    round_number = _int_field(getattr(round_, "round", round_))
    if round_number is not None:
        ids["round"] = round_number
    ordinal = _int_field(getattr(arg, "ordinal", None))
    if ordinal is not None:
        ids["branch"] = ordinal
    return ids


class LogContextInterceptor(Interceptor):
    """Worker interceptor: makes the round and branch named by an activity's input (``round``,
    ``ordinal`` fields) visible to :class:`TaskContextFilter` for the activity's log lines."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityIds(next)


class _ActivityIds(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        # The SDK copies this context into the thread that runs a sync activity.
        token = _activity_ids.set(_ids_from_input(input.args[0]) if input.args else {})
        try:
            return await super().execute_activity(input)
        finally:
            _activity_ids.reset(token)


def _record_ids(record: logging.LogRecord) -> dict[str, Any]:
    # The SDK's workflow and activity loggers put their details on the record; a plain logger
    # used inside an activity (a provider SDK's, ours) is reached through the activity context.
    details = getattr(record, "temporal_workflow", None) or getattr(
        record, "temporal_activity", None
    )
    workflow_id = details.get("workflow_id") if isinstance(details, dict) else None
    in_activity = activity.in_activity()
    if workflow_id is None and in_activity:
        workflow_id = activity.info().workflow_id
    ids = ids_from_workflow_id(workflow_id) if workflow_id else {}
    if in_activity:
        ids.update(_activity_ids.get() or {})
    return ids


class TaskContextFilter(logging.Filter):
    """Adds ``task_id``, ``round`` and ``branch`` (None when unknown) to every record; values a
    caller passed in ``extra`` win. Attach it to a handler so records of every logger get it."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = _record_ids(record)
        for name in ID_FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, ids.get(name))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the task ids, and the workflow
    and activity the line was written in."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in ID_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        for key in ("temporal_workflow", "temporal_activity"):
            details = getattr(record, key, None)
            if isinstance(details, dict):
                for field in ("workflow_id", "workflow_type", "activity_type", "attempt"):
                    if details.get(field) is not None:
                        line.setdefault(field, details[field])
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return jsonlib.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The human format, with ``[task r2 b1]`` when a line belongs to a task."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(errands_ids)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        task_id, round_, branch = (getattr(record, name, None) for name in ID_FIELDS)
        parts = [str(task_id)] if task_id else []
        if round_ is not None:
            parts.append(f"r{round_}")
        if branch is not None:
            parts.append(f"b{branch}")
        record.errands_ids = f" [{' '.join(parts)}]" if parts else ""
        return super().format(record)


def configure_logging(
    level: str | int = "INFO", json: bool = True, *, stream: IO[str] | None = None
) -> logging.Handler:
    """Send every log record to ``stream`` (stderr) as JSON lines or text, with the task ids.

    Replaces the handler an earlier call installed, leaves any other handler alone, and returns
    the new one. In JSON mode the SDK loggers stop appending their details to the message text:
    the same details are fields of the line.
    """
    if isinstance(level, str):
        resolved = logging.getLevelName(level.strip().upper())
        if not isinstance(resolved, int):
            raise ValueError(
                f"unknown log level {level!r}; use DEBUG, INFO, WARNING or ERROR "
                "(ERRANDS_LOG_LEVEL)"
            )
        level = resolved
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    handler.addFilter(TaskContextFilter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    workflow.logger.workflow_info_on_message = not json
    activity.logger.activity_info_on_message = not json
    return handler


def runtime_with_metrics(bind: str) -> Runtime:
    """A Temporal runtime whose SDK metrics (``temporal_…``) are served for Prometheus at
    ``http://{bind}/metrics``. Give it to the client the worker uses; one per process.
    ``bind`` is ``IP:port`` (``0.0.0.0:9464`` in a container)."""
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"ERRANDS_METRICS_BIND={bind!r} is not IP:port; use e.g. 127.0.0.1:9464 on a "
            "machine, or 0.0.0.0:9464 in a container that Prometheus scrapes"
        )
    try:
        return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=bind)))
    except ValueError as error:
        raise ValueError(
            f"the Prometheus endpoint could not start at ERRANDS_METRICS_BIND={bind!r} ({error}); "
            "give an IP address, not a host name, and a port no other process holds: each "
            "worker process on one machine needs its own"
        ) from error


def tracing_interceptors(tracer: Any = None) -> list[Any]:
    """``[TracingInterceptor]`` for the client (workers built from it inherit it) when the
    OpenTelemetry extra is installed, else ``[]`` and one log line saying how to get it.

    Spans go to the process's tracer provider (or ``tracer``): configure it the usual
    OpenTelemetry way, e.g. run the command under ``opentelemetry-instrument``.
    """
    try:
        contrib = importlib.import_module("temporalio.contrib.opentelemetry")
    except ImportError as error:
        _log.warning(
            "ERRANDS_OTEL is on but OpenTelemetry is not installed (%s); tracing is off. "
            "Install it with `pip install 'errands[otel]'`.",
            error,
        )
        return []
    return [contrib.TracingInterceptor(tracer)]
