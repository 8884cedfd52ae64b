// Reading a task's event log (GET /v1/tasks/{id}/events) and listing it on the page; what each
// event changes is the caller's (rounds.js).
// Server-sent events read with fetch, so the bearer token travels in a header (an EventSource
// cannot send one); a 401, or an `unauthorized` event on an open stream (the gateway asks the
// token again as the stream goes), brings the sign-in prompt back. A dropped connection resumes after
// the last seq applied (Last-Event-ID); a repeated seq is dropped, so no event is lost or shown
// twice.

import { $, auth, el, headers, taskPath } from "./api.js";
import { page } from "./page.js";

const RETRY_MS = 500;
const RETRY_MAX_MS = 8000;
const LOG_LIMIT = 3000; // event-log rows kept on the page

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Reads the log of the task `watch` follows until it ends or is no longer followed: each new
// event goes to on.event(watch, event); on.ended(watch) runs when the task ended with no last
// event in its log.
export async function stream(watch, on) {
  let delay = RETRY_MS;
  while (!watch.ended && page.current === watch) {
    const before = watch.lastSeq;
    const outcome = await readStream(watch, on);
    if (outcome === "stop" || watch.ended) return;
    if (watch.lastSeq > before) delay = RETRY_MS; // it moved on: retry soon
    await sleep(delay);
    delay = Math.min(delay * 2, RETRY_MAX_MS);
  }
}

// One connection: "stop" when there is nothing more to read, "retry" otherwise.
async function readStream(watch, on) {
  watch.abort = new AbortController();
  const extra = { Accept: "text/event-stream" };
  if (watch.lastSeq) extra["Last-Event-ID"] = String(watch.lastSeq);
  try {
    const response = await fetch(taskPath(watch.id, "/events"), {
      headers: headers(extra),
      signal: watch.abort.signal,
      cache: "no-store",
    });
    if (response.status === 204) {
      await on.ended(watch); // ended, and every event of it is read
      return "stop";
    }
    if (!response.ok) {
      const data = await response.json().catch(() => ({}));
      if (page.current !== watch) return "stop";
      const reason = data.detail || `event stream: ${response.status}`;
      if (response.status === 401) {
        auth.refused(reason); // the token stopped working: sign in again
        return "stop";
      }
      $("task-error").textContent = reason;
      return response.status >= 500 ? "retry" : "stop";
    }
    $("task-error").textContent = "";
    await readFrames(response.body, (frame) => onFrame(watch, frame, on));
  } catch (error) {
    if (watch.abort.signal.aborted) return "stop";
  }
  return "retry";
}

async function readFrames(body, onFrame) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return; // a frame cut short by a drop stays in the buffer, unapplied
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = parseFrame(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (frame.data.length) onFrame(frame);
    }
  }
}

function parseFrame(raw) {
  const frame = { id: null, event: "message", data: [] };
  for (const line of raw.split("\n")) {
    if (!line || line.startsWith(":")) continue; // comments: the keep-alives
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (name === "id") frame.id = value;
    else if (name === "event") frame.event = value;
    else if (name === "data") frame.data.push(value);
  }
  return frame;
}

function onFrame(watch, frame, on) {
  if (page.current !== watch) return;
  let event;
  try {
    event = JSON.parse(frame.data.join("\n"));
  } catch (error) {
    return;
  }
  if (frame.event === "unauthorized") {
    // The stream's credential stopped working (a revoked key, an expired token): sign in again.
    watch.abort.abort();
    auth.refused(event.detail || "the token stopped working; sign in again");
    return;
  }
  const seq = Number(event.seq ?? frame.id);
  if (!Number.isFinite(seq) || watch.seen.has(seq)) return;
  watch.seen.add(seq);
  watch.lastSeq = Math.max(watch.lastSeq, seq);
  event.type = event.type || frame.event;
  logEvent(watch, event);
  on.event(watch, event);
}

function logEvent(watch, event) {
  const list = $("event-log");
  const item = el(
    "li",
    { testid: "event" },
    el("span", { class: "seq" }, String(event.seq)),
    ` ${event.type} `,
    el("span", { class: "muted" }, eventSummary(event)),
  );
  item.dataset.seq = String(event.seq);
  item.dataset.type = event.type;
  list.append(item);
  while (list.childElementCount > LOG_LIMIT) list.firstElementChild.remove();
  $("event-count").textContent = String(watch.seen.size);
}

function eventSummary(e) {
  const parts = [e.where, e.round !== undefined ? `round ${e.round}` : null];
  parts.push(e.ordinal ? `#${e.ordinal}` : null, e.tool, e.model);
  parts.push(e.status, e.mode, e.outcome, e.kind);
  if (e.step !== undefined) parts.push(`step ${e.step}`);
  if (e.attempt > 1) parts.push(`attempt ${e.attempt}`);
  return parts.filter((p) => p !== null && p !== undefined && p !== "").join(" · ");
}
