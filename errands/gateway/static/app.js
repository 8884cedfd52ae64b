// The errands page: a session list, a session's conversation and tasks, and one task followed
// live through its event log (GET /v1/tasks/{id}/events): rounds, branches, tools, the reply as
// it is written, questions, approvals, steering messages and side questions.
// Plain DOM, no build step. Every text from the server becomes a text node (textContent or
// append(string)); nothing is ever parsed as HTML, markdown included.
// ES modules, one concern each: api.js (calls, token, el), signin.js (who the page acts as,
// the sign-in prompt), markdown.js (blocks and live text) with inline.js (its inline marks),
// sessions.js (the list and the open session), task.js (the task followed), events.js (reading
// its event log), rounds.js (what each event changes), cards.js (questions and approvals). This
// one starts and follows tasks, sends messages, side questions and cancels, and wires the page
// up.

import { $, api, taskPath } from "./api.js";
import { collectAnswers, sendAnswer, sendApproval } from "./cards.js";
import { renderMarkdown } from "./markdown.js";
import { page } from "./page.js";
import {
  forgetSessions,
  loadConversation,
  loadSessions,
  openSession,
  sessionKey,
} from "./sessions.js";
import { bindSignIn, signIn } from "./signin.js";
import { follow, forgetTask, showReceipt, temporalLink } from "./task.js";

// -- starting and following a task ----------------------------------------------------------

async function startTask(event) {
  event.preventDefault();
  $("start-error").textContent = "";
  const session = $("session").value.trim();
  const body = { text: $("task-text").value };
  if ($("model").value.trim()) body.model = $("model").value.trim();
  if ($("fallback-model").value.trim()) body.fallback_model = $("fallback-model").value.trim();
  if ($("headless").checked) body.headless = true;
  try {
    const created = await api("POST", `/v1/sessions/${encodeURIComponent(session)}/tasks`, body);
    openSession(session);
    follow(created.task_id, session, body.text.slice(0, 80));
    setTimeout(loadSessions, 1500); // once visibility has caught up with the start
  } catch (error) {
    $("start-error").textContent = error.message;
  }
}

async function followExisting(event) {
  event.preventDefault();
  $("start-error").textContent = "";
  const id = $("watch-id").value.trim();
  try {
    const state = await api("GET", taskPath(id));
    openSession(state.session_id);
    follow(id, state.session_id);
  } catch (error) {
    $("start-error").textContent = error.message;
  }
}

// -- messages into the task, side questions, cancel ---------------------------------------------

const RECEIPTS = {
  steer: "The agent reads it before its next step.",
  interrupt: "The round in flight stops; the agent reads it next.",
  queue: "It becomes the session's next task once this one ends.",
};

async function sendMessage(event) {
  event.preventDefault();
  const watch = page.current;
  if (!watch) return;
  $("message-receipt").textContent = "";
  $("message-error").textContent = "";
  const mode = $("message-mode").value;
  try {
    const body = { text: $("message-text").value, mode };
    const got = await api("POST", taskPath(watch.id, "/messages"), body);
    if (got.status === "started") {
      // Queued on a task that had ended: the message started the session's next task at once.
      showReceipt(got.message_id, got.status, `Started the session's next task: ${got.task_id}.`);
    } else {
      const accepted = `${got.status === "queued" ? "Queued" : "Accepted"} as ${got.message_id}.`;
      watch.receipts.set(got.message_id, accepted);
      const what = RECEIPTS[got.mode] || RECEIPTS[mode];
      showReceipt(got.message_id, got.status, `${accepted} ${what}`);
    }
    $("message-text").value = "";
  } catch (error) {
    $("message-error").textContent = error.message; // a finished task says how to go on
  }
}

async function askSide(event) {
  event.preventDefault();
  if (!page.current) return;
  const out = $("btw-answer");
  out.textContent = "asking…";
  try {
    const body = { question: $("btw-question").value };
    const answer = await api("POST", taskPath(page.current.id, "/btw"), body);
    renderMarkdown(out, answer.answer);
  } catch (error) {
    out.textContent = error.message;
  }
}

async function cancelTask() {
  if (!page.current) return;
  try {
    await api("POST", taskPath(page.current.id, "/cancel"));
  } catch (error) {
    $("task-error").textContent = error.message;
  }
}

// -- the page ------------------------------------------------------------------------------------

function newSessionId() {
  const bytes = new Uint8Array(4);
  crypto.getRandomValues(bytes);
  return "s-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function loadInfo() {
  try {
    page.info = await api("GET", "/v1/info");
  } catch (error) {
    page.info = null; // no link to the Temporal UI, nothing else lost
  }
  if (page.current) temporalLink(page.current.id);
}

// The address the page was opened at (#session=… or #task=…), opened once someone is signed in.
let landing = new URLSearchParams(location.hash.slice(1));

// What a principal sees once signed in: their sessions, and the session or task the address
// names (or the session they last opened).
async function enter() {
  const at = landing;
  landing = new URLSearchParams();
  openSession(at.get("session") || localStorage.getItem(sessionKey()) || newSessionId());
  await Promise.all([loadInfo(), loadSessions()]);
  if (at.get("task")) {
    $("watch-id").value = at.get("task");
    $("watch-form").requestSubmit();
  }
}

// After a sign-out, or a token that stopped working: nothing the principal saw stays.
function leave() {
  forgetTask();
  forgetSessions();
  page.info = null;
  for (const id of ["task-text", "watch-id"]) $(id).value = "";
  $("start-error").textContent = "";
  history.replaceState(null, "", location.pathname);
}

function bind() {
  bindSignIn(enter, leave);
  $("start-form").addEventListener("submit", startTask);
  $("watch-form").addEventListener("submit", followExisting);
  $("question").addEventListener("submit", (e) => {
    e.preventDefault();
    sendAnswer("answered", collectAnswers());
  });
  $("answer-dismiss").addEventListener("click", () => sendAnswer("answered", {}));
  $("answer-cancel").addEventListener("click", () => sendAnswer("cancelled", {}));
  $("approval-approve").addEventListener("click", () => sendApproval("approve"));
  $("approval-always").addEventListener("click", () => sendApproval("approve_always"));
  $("approval-deny").addEventListener("click", () => sendApproval("deny"));
  $("message-form").addEventListener("submit", sendMessage);
  $("btw-form").addEventListener("submit", askSide);
  $("cancel").addEventListener("click", cancelTask);
  $("refresh").addEventListener("click", () => { loadConversation(); loadSessions(); });
  $("sessions-refresh").addEventListener("click", loadSessions);
  $("new-session").addEventListener("click", () => openSession(newSessionId()));
  $("next-task").addEventListener("click", () => {
    if (page.current) follow($("next-task").textContent, page.current.session);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  bind();
  signIn();
});
