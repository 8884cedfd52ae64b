"""B1e: what payload encryption costs a task.

B1's errands task (2 rounds, 3 branches) on three workers of the same process and server: one
whose client and worker carry the AES-GCM codec (``ERRANDS_ENCRYPTION_KEYS`` set,
``errands.adapters.encryption.data_converter``), one without, and a third whose codec returns
every payload as it is: what the SDK's handling of any codec costs (it walks every activation
and completion for payloads once a codec is set), apart from AES-GCM itself.

Tasks rotate (encrypted, plain, identity; then plain, identity, encrypted; …), so drift in the
machine's load and any ordering effect hit all alike; each is measured from the
``start_workflow`` call to its result, and by the CPU time this process (client, workers,
scripted model server) spent on it. The encrypted tasks' histories are checked to hold encrypted
payloads (and not the task's text), and the codec's own CPU time for one task's payloads is
measured apart, so a gap can be told from noise.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from pydantic import SecretStr
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadCodec

from bench._harness import Stack, stack_for
from bench._measure import summary_ms
from bench._model import model_name
from errands.adapters.encryption import (
    ENCODING,
    AesGcmCodec,
    configured_keys,
    data_converter,
    new_key,
)

TITLE = "B1e · payload encryption on against off"
FULL = {"tasks": 300, "warmup": 5}
SMOKE = {"tasks": 1, "warmup": 0}
TARGET = 1.05
MODEL = model_name(1, 3)
TEXT = "Compare three ways to run this service and recommend one."
CODEC_REPEATS = 200
KINDS = ("on", "off", "identity")
LABELS = {"on": "AES-GCM (on)", "off": "none (off)", "identity": "identity (no encryption)"}


class IdentityCodec(PayloadCodec):
    """A codec that changes nothing: the SDK's codec plumbing without any encryption."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


PLACES = {
    "search_attributes": "search attributes",
    "marker_recorded_event_attributes": "markers",
}
"""Where a payload sits, by the field it is under: search attributes, which no codec may
encrypt, and markers, whose bookkeeping (a local activity's, a patch's) the SDK's core writes
without the codec (their results go through it)."""


def payloads_in(message: Message, place: str = "elsewhere") -> Iterator[tuple[str, Payload]]:
    """Every ``Payload`` inside a protobuf message (a history event), maps and lists included,
    with the place it sits in (``PLACES``)."""
    for field, value in message.ListFields():
        kind = field.message_type
        if field.type != FieldDescriptor.TYPE_MESSAGE or kind is None:
            continue
        under = PLACES.get(field.name, place)
        if kind.GetOptions().map_entry:
            if kind.fields_by_name["value"].type != FieldDescriptor.TYPE_MESSAGE:
                continue
            items = list(value.values())
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            if isinstance(item, Payload):
                yield under, item
            else:
                yield from payloads_in(item, under)


async def task_payloads(
    client: Client, workflow_id: str
) -> tuple[list[tuple[str, Payload]], bytes]:
    """The raw payloads of a task's history and its children's (with their places), and those
    histories' protobuf bytes (where a payload's data is as written, not in base64)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    found: list[tuple[str, Payload]] = []
    raw = b"".join(event.SerializeToString() for event in history.events)
    children: list[str] = []
    for event in history.events:
        found += payloads_in(event)
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            children.append(
                event.start_child_workflow_execution_initiated_event_attributes.workflow_id
            )
    for child in children:
        more, more_raw = await task_payloads(client, child)
        found += more
        raw += more_raw
    return found, raw


async def codec_ms_per_task(codec: AesGcmCodec, sealed: list[Payload]) -> float:
    """CPU milliseconds one task's payloads cost the codec: each decrypted once and encrypted
    once, as the worker and the client do between them (a median of repeated timings)."""
    plain = await codec.decode(sealed)
    spans = []
    for _ in range(CODEC_REPEATS):
        began = time.process_time()
        await codec.encode(plain)
        await codec.decode(sealed)
        spans.append(time.process_time() - began)
    return statistics.median(spans) * 1000


async def run(tasks: int, warmup: int, stack: Stack | None = None) -> dict[str, Any]:
    async with stack_for("b1e", stack) as stack:
        plain = stack.settings()
        keyed = stack.settings().model_copy(
            update={"encryption_keys": SecretStr(f"bench={new_key()}")}
        )
        keys = configured_keys(keyed)
        assert keys is not None
        sealed_client = await Client.connect(
            stack.server.address, data_converter=data_converter(keyed)
        )
        identity_client = await Client.connect(
            stack.server.address,
            data_converter=dataclasses.replace(
                pydantic_data_converter, payload_codec=IdentityCodec()
            ),
        )
        identity = stack.settings()
        await stack.worker(plain)
        await stack.worker(keyed, client=sealed_client)
        await stack.worker(identity, client=identity_client)
        jobs = {
            "on": lambda: stack.run_task(keyed, MODEL, text=TEXT, client=sealed_client),
            "off": lambda: stack.run_task(plain, MODEL, text=TEXT),
            "identity": lambda: stack.run_task(identity, MODEL, text=TEXT, client=identity_client),
        }
        for _ in range(warmup):
            for job in jobs.values():
                await job()
        times: dict[str, list[float]] = {k: [] for k in KINDS}
        cpu: dict[str, list[float]] = {k: [] for k in KINDS}
        ids: dict[str, list[str]] = {k: [] for k in KINDS}
        for n in range(tasks):
            # Rotated: no kind always runs first, or right after the same other kind.
            for kind in KINDS[n % 3 :] + KINDS[: n % 3]:
                began = time.process_time()
                elapsed, workflow_id = await jobs[kind]()
                cpu[kind].append(time.process_time() - began)
                times[kind].append(elapsed)
                ids[kind].append(workflow_id)

        placed, raw = await task_payloads(stack.client, ids["on"][0])
        payloads = [p for _, p in placed]
        sealed = [p for p in payloads if p.metadata.get("encoding") == ENCODING]
        clear = Counter(place for place, p in placed if p.metadata.get("encoding") != ENCODING)
        codec_ms = await codec_ms_per_task(AesGcmCodec(keys), sealed)
        plain_payloads, plain_raw = await task_payloads(stack.client, ids["off"][0])

    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    pairs = [a / b for a, b in zip(times["on"], times["off"], strict=True)]
    return {
        "shape": "B1's errands task: round 0 delegates 3 branches, round 1 replies",
        "latency": {kind: summary_ms(values) for kind, values in times.items()},
        "ratio_on_to_off": round(on / off, 3),
        "ratio_of_minimums": round(min(times["on"]) / min(times["off"]), 3),
        "median_of_paired_ratios": round(statistics.median(pairs), 3),
        "ratio_identity_to_off": round(statistics.median(times["identity"]) / off, 3),
        "cpu_ms_per_task": {
            kind: round(statistics.median(values) * 1000, 1) for kind, values in cpu.items()
        },
        "payloads_per_task": len(payloads),
        "payloads_encrypted_per_task": len(sealed),
        "payloads_not_encrypted": dict(sorted(clear.items())),
        "payload_bytes_per_task": {
            "on": sum(p.ByteSize() for p in payloads),
            "off": sum(p.ByteSize() for _, p in plain_payloads),
        },
        "task_text_in_raw_history": TEXT.encode() in raw,
        # The same search in a plain task's histories, which must find it: the search works.
        "task_text_in_plain_history": TEXT.encode() in plain_raw,
        "codec_cpu_ms_per_task": round(codec_ms, 2),
        "target": f"ratio on / off <= {TARGET}",
    }


def verdict(result: dict[str, Any]) -> tuple[str, str, bool]:
    lat = result["latency"]
    figure = (
        f"{result['ratio_on_to_off']}× with encryption on ({lat['on']['median_ms']:.0f} vs "
        f"{lat['off']['median_ms']:.0f} ms median); the codec's own CPU "
        f"{result['codec_cpu_ms_per_task']} ms a task"
    )
    return figure, f"≤ {TARGET}×", result["ratio_on_to_off"] <= TARGET


def markdown(result: dict[str, Any]) -> str:
    lat = result["latency"]
    lines = [
        f"Shape: {result['shape']}.",
        "",
        "| codec | median ms | p95 ms | min ms | max ms | n | CPU ms a task (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in KINDS:
        s, cpu = lat[kind], result["cpu_ms_per_task"][kind]
        lines.append(
            f"| {LABELS[kind]} | {s['median_ms']} | {s['p95_ms']} | {s['min_ms']} | "
            f"{s['max_ms']} | {s['n']} | {cpu} |"
        )
    size = result["payload_bytes_per_task"]
    text_seen = "**yes**" if result["task_text_in_raw_history"] else "no"
    if "task_text_in_plain_history" in result:
        found = "found" if result["task_text_in_plain_history"] else "**not found**"
        text_seen += f" (in a plain task's, the same search: {found})"
    clear = result["payloads_not_encrypted"]
    others = ", ".join(f"{n} in {place}" for place, n in clear.items()) or "none"
    lines += [
        "",
        f"**Ratio (median on / median off): {result['ratio_on_to_off']}** (target ≤ {TARGET}); "
        f"of the fastest runs {result['ratio_of_minimums']}; the median of each encrypted "
        f"task's time over the plain one run beside it {result['median_of_paired_ratios']}. The "
        f"identity codec's median over the plain: {result['ratio_identity_to_off']}. CPU is "
        "what this process (client, workers, scripted model server) spent on one task.",
        "",
        f"An encrypted task's histories (the task and its branches) hold "
        f"{result['payloads_per_task']} payloads, {result['payloads_encrypted_per_task']} of "
        f"them encrypted; the others ({others}) are search attributes, which no codec may "
        "encrypt, and markers' bookkeeping the SDK's core writes without the codec (a local "
        "activity's type and times, a patch's id; their results are encrypted). Payload bytes a "
        f"task: {size['on']:,} encrypted, {size['off']:,} plain. The task's text in the raw "
        f"histories: {text_seen}.",
        "",
        f"The codec's own CPU for one task's payloads (each encrypted once and decrypted once, "
        f"AES-256-GCM): {result['codec_cpu_ms_per_task']} ms, against the "
        f"{lat['off']['median_ms']} ms the task takes.",
    ]
    return "\n".join(lines)
