// The session list (GET /v1/tasks, grouped by session: the gateway lists only the signed-in
// principal's) and the open session: its tasks and its conversation
// (GET /v1/sessions/{id}/messages), read on from the last message shown.

import { $, api, el } from "./api.js";
import { renderMarkdown } from "./markdown.js";
import { page } from "./page.js";
import { follow, stop } from "./task.js";

export async function loadSessions() {
  $("sessions-error").textContent = "";
  try {
    const data = await api("GET", "/v1/tasks?limit=50");
    page.sessions = new Map();
    for (const task of data.tasks) {
      const key = task.session_id || "(no session)";
      if (!page.sessions.has(key)) page.sessions.set(key, []);
      page.sessions.get(key).push(task); // newest first, as the server lists them
    }
    renderSessions();
    renderSessionTasks();
  } catch (error) {
    $("sessions-error").textContent = error.message;
  }
}

// Empties the list and the open session: after a sign-out nothing of them stays on the page.
export function forgetSessions() {
  page.sessions = new Map();
  page.convo = null;
  for (const id of ["sessions", "session-tasks", "conversation"]) $(id).replaceChildren();
  for (const id of ["session-name", "sessions-error"]) $(id).textContent = "";
  $("session").value = "";
  $("sessions-empty").hidden = true;
}

// Where the session last opened is remembered: one key per principal, so a sign-in as someone
// else never opens it (the loopback user, and a gateway that names no one, keep the plain key).
export function sessionKey() {
  const me = page.me;
  return me && me.via !== "local" ? `errands.session:${me.id}` : "errands.session";
}

export function renderSessions() {
  const list = $("sessions");
  list.replaceChildren();
  for (const [id, tasks] of withCurrentTask(page.sessions)) {
    const latest = tasks[0];
    const count = `${tasks.length} task${tasks.length === 1 ? "" : "s"}`;
    const button = el(
      "button",
      { type: "button", class: "session-button" },
      el("span", { class: "session-id" }, id),
      el("span", { class: "session-summary" }, latest.summary || ""),
      el("span", { class: "muted" }, `${count} · ${latest.status}`),
    );
    button.addEventListener("click", () => openSession(id));
    const item = el("li", { testid: "session-item" }, button);
    item.dataset.session = id;
    if (page.convo && page.convo.session === id) button.setAttribute("aria-current", "true");
    list.append(item);
  }
  $("sessions-empty").hidden = list.childElementCount > 0;
}

// The list comes from Temporal's visibility, which lags a start by a second or so: until it
// has caught up, the task followed is added to it.
function withCurrentTask(listed) {
  const current = page.current;
  if (!current || !current.session) return listed;
  const tasks = listed.get(current.session) || [];
  if (tasks.some((t) => t.task_id === current.id)) return listed;
  const shown = { task_id: current.id, status: "running", summary: current.summary || "" };
  const others = [...listed].filter(([id]) => id !== current.session);
  return new Map([[current.session, [shown, ...tasks]], ...others]);
}

// -- the open session: its tasks and its conversation ---------------------------------------

// Opens a session: its tasks and its conversation. A task of another session is no longer
// followed (the page shows one session at a time).
export function openSession(id) {
  if (page.current && page.current.session !== id) {
    stop(page.current);
    page.current = null;
    $("task").hidden = true;
  }
  $("session").value = id;
  localStorage.setItem(sessionKey(), id);
  if (!page.convo || page.convo.session !== id) {
    page.convo = { session: id, lastSeq: 0, rows: new Map() };
    $("conversation").replaceChildren();
  }
  $("session-name").textContent = id;
  if (!page.current) history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
  renderSessions();
  renderSessionTasks();
  loadConversation();
}

export function renderSessionTasks() {
  const { convo, current } = page;
  const list = $("session-tasks");
  list.replaceChildren();
  if (!convo) return;
  const tasks = withCurrentTask(page.sessions).get(convo.session) || [];
  for (const task of tasks) {
    const button = el(
      "button",
      { type: "button", class: "link" },
      el("span", {}, task.summary || task.task_id),
      el("span", { class: "muted" }, ` · ${task.status}${when(task.started_at)}`),
    );
    button.addEventListener("click", () => follow(task.task_id, convo.session));
    const item = el("li", { testid: "session-task" }, button);
    item.dataset.taskId = task.task_id;
    item.dataset.status = task.status;
    if (current && current.id === task.task_id) button.setAttribute("aria-current", "true");
    list.append(item);
  }
}

function when(iso) {
  return iso ? " · " + iso.slice(0, 19).replace("T", " ") : "";
}

// Reads the session's messages after the last one shown (seqs never change once assigned) and
// returns every message read so far.
export async function loadConversation() {
  const view = page.convo;
  if (!view) return [];
  try {
    const path = `/v1/sessions/${encodeURIComponent(view.session)}/messages?after=${view.lastSeq}`;
    const data = await api("GET", path);
    if (page.convo !== view) return [];
    for (const m of data.messages) {
      if (view.rows.has(m.id) || m.seq <= view.lastSeq) continue;
      view.rows.set(m.id, m);
      view.lastSeq = Math.max(view.lastSeq, m.seq);
      $("conversation").append(messageItem(m));
    }
  } catch (error) {
    // A session with no task yet (a new one) has no conversation: the gateway says 404, as it
    // does for a session of someone else's, and the page shows it empty either way.
    if (error.status !== 404) $("sessions-error").textContent = error.message;
  }
  return [...view.rows.values()];
}

const SHOWN = new Set(["user", "ack", "reply"]); // what the conversation shows in full

function messageItem(m) {
  const who = m.kind === m.role ? m.role : `${m.role} · ${m.kind}`;
  const item = el("li", { testid: "message" }, el("span", { class: "who" }, who));
  Object.assign(item.dataset, { role: m.role, kind: m.kind, seq: String(m.seq), id: m.id });
  if (SHOWN.has(m.kind)) {
    const body = el("div", { class: "md" });
    renderMarkdown(body, m.text);
    item.append(body);
  } else {
    // Branch answers, notes and summaries: there, but folded away.
    const first = m.text.split("\n", 1)[0];
    const covers = m.kind === "compaction" && m.covers;
    const label = covers ? `summary of ${covers[0]}–${covers[1]}` : first.slice(0, 80) || m.kind;
    item.append(el("details", {}, el("summary", {}, label), el("div", { class: "text" }, m.text)));
  }
  return item;
}
