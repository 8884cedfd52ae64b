// The errands page: start a task, follow its progress stream, answer its questions and approvals.
// Plain DOM, no build step; every text from the server is set with textContent, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const ENDED = new Set(["replied", "failed", "canceled"]);
const OTHER = "Other";

let current = null; // {id, session, lastEventId, seen: Set, ended, abort}

// -- the API ------------------------------------------------------------------------------

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  const token = $("token").value.trim();
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.detail || `${response.status} ${response.statusText}`);
  return data;
}

// -- starting and following a task --------------------------------------------------------

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
    localStorage.setItem("errands.session", session);
    follow(created.task_id, session);
  } catch (error) {
    $("start-error").textContent = error.message;
  }
}

async function followExisting(event) {
  event.preventDefault();
  $("start-error").textContent = "";
  const id = $("watch-id").value.trim();
  try {
    const state = await api("GET", `/v1/tasks/${encodeURIComponent(id)}`);
    if (state.session_id) $("session").value = state.session_id;
    follow(id, state.session_id);
  } catch (error) {
    $("start-error").textContent = error.message;
  }
}

function follow(taskId, session) {
  if (current && current.abort) current.abort.abort();
  current = { id: taskId, session, lastEventId: null, seen: new Set(), ended: false, abort: null };
  history.replaceState(null, "", `#task=${encodeURIComponent(taskId)}`);
  $("task").hidden = false;
  $("task-id").textContent = taskId;
  $("rounds").replaceChildren();
  $("reply-box").hidden = true;
  $("reply").textContent = "";
  $("task-error").textContent = "";
  $("btw-answer").textContent = "";
  hideQuestion();
  setStatus("running");
  $("task-phase").textContent = "";
  $("cancel").hidden = false;
  stream(current);
  loadConversation();
}

// Server-sent events read with fetch, so the bearer token travels in a header (an EventSource
// cannot send one) and a dropped connection resumes after the last event seen.
async function stream(watch) {
  let delay = 500;
  while (!watch.ended && current === watch) {
    watch.abort = new AbortController();
    const extra = { Accept: "text/event-stream" };
    if (watch.lastEventId) extra["Last-Event-ID"] = watch.lastEventId;
    try {
      const response = await fetch(`/v1/tasks/${encodeURIComponent(watch.id)}/events`, {
        headers: headers(extra),
        signal: watch.abort.signal,
      });
      if (response.status === 204) return;
      if (!response.ok) {
        const data = await response.json().catch(() => ({}));
        $("task-error").textContent = data.detail || `progress stream: ${response.status}`;
        if (response.status < 500) return;
      } else {
        await readFrames(response.body, (frame) => onFrame(watch, frame));
        delay = 500;
      }
    } catch (error) {
      if (watch.abort.signal.aborted) return;
    }
    if (!watch.ended) await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 8000);
  }
}

async function readFrames(body, onFrame) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const raw = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const frame = { id: null, event: "message", data: [] };
      for (const line of raw.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (name === "id") frame.id = val;
        else if (name === "event") frame.event = val;
        else if (name === "data") frame.data.push(val);
      }
      if (frame.data.length) onFrame(frame);
    }
  }
}

function onFrame(watch, frame) {
  if (current !== watch) return;
  if (frame.id) {
    watch.lastEventId = frame.id;
    if (watch.seen.has(frame.id)) return;
    watch.seen.add(frame.id);
  }
  const data = JSON.parse(frame.data.join("\n"));
  apply(watch, frame.event, data);
}

// -- what each progress event changes on the page ------------------------------------------

function apply(watch, type, data) {
  switch (type) {
    case "round_started":
      roundCard(data.round);
      setStatus("running");
      break;
    case "phase":
      $("task-phase").textContent = data.phase;
      break;
    case "waiting_for_user":
      setStatus("waiting_for_user");
      note(data.round, `asked you: ${data.question.questions.map((q) => q.header).join(", ")}`);
      showQuestion(data.question);
      break;
    case "question_answered":
      hideQuestion();
      note(data.round, "your answer was taken");
      setStatus("running");
      break;
    case "approval_requested":
      setStatus("waiting_for_user");
      note(data.round, `asks to run ${data.approval.tool}`);
      showApproval(data.approval);
      break;
    case "approval_answered":
      hideApproval(data.approval_id);
      setStatus("running");
      break;
    case "delegated":
      delegated(data);
      break;
    case "branch_finished":
      branchFinished(data);
      loadConversation();
      break;
    case "replied":
    case "failed":
    case "canceled":
      watch.ended = true;
      ended(type, data);
      break;
    case "error":
      watch.ended = true;
      $("task-error").textContent = data.detail;
      break;
  }
}

function setStatus(status) {
  const badge = $("task-status");
  badge.textContent = status.replace(/_/g, " ");
  badge.dataset.status = status;
}

function roundCard(round) {
  let card = document.querySelector(`#rounds > li[data-round="${round}"]`);
  if (card) return card;
  card = document.createElement("li");
  card.dataset.round = String(round);
  card.dataset.testid = "round";
  const title = document.createElement("h3");
  title.textContent = `Round ${round}`;
  const ack = document.createElement("p");
  ack.className = "ack";
  const branches = document.createElement("ul");
  branches.className = "branches";
  card.append(title, ack, branches);
  $("rounds").append(card);
  return card;
}

function note(round, text) {
  const line = document.createElement("p");
  line.className = "note";
  line.textContent = text;
  roundCard(round).querySelector(".branches").before(line);
}

function branchItem(round, ordinal) {
  const card = roundCard(round);
  const key = `${round}-${ordinal}`;
  let item = card.querySelector(`li[data-branch="${key}"]`);
  if (item) return item;
  item = document.createElement("li");
  item.dataset.branch = key;
  item.dataset.testid = "branch";
  item.dataset.status = "running";
  const head = document.createElement("div");
  head.className = "branch-head";
  const text = document.createElement("div");
  text.className = "text branch-text";
  item.append(head, text);
  card.querySelector(".branches").append(item);
  return item;
}

function delegated(data) {
  const card = roundCard(data.round);
  card.querySelector(".ack").textContent = data.reply || "";
  for (const sub of data.subtasks) {
    const item = branchItem(data.round, sub.ordinal);
    item.querySelector(".branch-head").textContent =
      `#${sub.ordinal} ${sub.type}: ${sub.prompt} — ${item.dataset.status}`;
  }
}

function branchFinished(data) {
  const item = branchItem(data.round, data.ordinal);
  item.dataset.status = data.status;
  const head = item.querySelector(".branch-head");
  const label = head.textContent.replace(/ — \w+$/, "") || `#${data.ordinal} ${data.type}`;
  head.textContent = `${label} — ${data.status}`;
  item.querySelector(".branch-text").textContent = data.text;
}

function ended(status, state) {
  setStatus(status);
  $("cancel").hidden = true;
  $("task-phase").textContent = "";
  hideQuestion();
  if (state.reply) {
    $("reply-box").hidden = false;
    $("reply").textContent = state.reply;
  }
  if (state.error) $("task-error").textContent = `${state.error.kind}: ${state.error.message}`;
  loadConversation();
}

// -- the question picker -----------------------------------------------------------------

function showQuestion(question) {
  const form = $("question");
  form.dataset.questionSetId = question.id;
  const body = $("question-body");
  body.replaceChildren();
  $("answer-error").textContent = "";
  for (const q of question.questions) body.append(questionField(q));
  form.hidden = false;
}

function hideQuestion() {
  $("question").hidden = true;
  $("question-body").replaceChildren();
}

function questionField(q) {
  const set = document.createElement("fieldset");
  set.dataset.qid = q.id;
  set.dataset.type = q.type;
  const legend = document.createElement("legend");
  legend.textContent = q.header;
  const prompt = document.createElement("p");
  prompt.textContent = q.question + (q.multi_select ? " (choose any)" : "");
  set.append(legend, prompt);
  if (q.type === "text") {
    const area = document.createElement("textarea");
    area.name = q.id;
    area.rows = 2;
    area.setAttribute("aria-label", q.header);
    set.append(area);
    return set;
  }
  const kind = q.multi_select ? "checkbox" : "radio";
  for (const option of q.options) {
    const label = document.createElement("label");
    label.className = "option";
    const input = document.createElement("input");
    input.type = kind;
    input.name = q.id;
    input.value = option.free_text ? "" : option.label;
    input.dataset.freeText = option.free_text ? "1" : "";
    label.append(input, " " + option.label);
    if (option.description && !option.free_text) {
      const hint = document.createElement("small");
      hint.textContent = " — " + option.description;
      label.append(hint);
    }
    if (option.free_text) {
      const other = document.createElement("input");
      other.type = "text";
      other.className = "other";
      other.placeholder = "your own answer";
      other.setAttribute("aria-label", `${q.header}: your own answer`);
      other.addEventListener("input", () => { if (other.value) input.checked = true; });
      label.append(" ", other);
    }
    set.append(label);
  }
  return set;
}

function collectAnswers() {
  const answers = {};
  for (const set of $("question-body").querySelectorAll("fieldset")) {
    const qid = set.dataset.qid;
    const values = [];
    if (set.dataset.type === "text") {
      const text = set.querySelector("textarea").value.trim();
      if (text) values.push(text);
    } else {
      for (const input of set.querySelectorAll(`input[name="${qid}"]:checked`)) {
        if (input.dataset.freeText) {
          const text = input.parentElement.querySelector("input.other").value.trim();
          if (text) values.push(`${OTHER}: ${text}`);
          else values.push(OTHER); // rejected by the server with a message saying to write it
        } else {
          values.push(input.value);
        }
      }
    }
    answers[qid] = values;
  }
  return answers;
}

async function sendAnswer(status, answers) {
  $("answer-error").textContent = "";
  const form = $("question");
  try {
    await api("POST", `/v1/tasks/${encodeURIComponent(current.id)}/answer`, {
      question_set_id: form.dataset.questionSetId,
      status,
      answers,
    });
    hideQuestion();
    setStatus("running");
  } catch (error) {
    $("answer-error").textContent = error.message;
  }
}

// -- approvals ---------------------------------------------------------------------------

function showApproval(approval) {
  const form = $("approval");
  form.dataset.approvalId = approval.approval_id;
  $("approval-tool").textContent = approval.tool;
  $("approval-where").textContent = approval.where === "main" ? "(the main agent)" : `(${approval.where})`;
  $("approval-why").textContent = approval.why || "";
  $("approval-arguments").textContent = approval.arguments;
  $("approval-always").hidden = !approval.can_approve_always;
  $("approval-reason").value = "";
  $("approval-error").textContent = "";
  form.hidden = false;
}

function hideApproval(approvalId) {
  const form = $("approval");
  if (!approvalId || form.dataset.approvalId === approvalId) form.hidden = true;
}

async function sendApproval(decision) {
  const form = $("approval");
  $("approval-error").textContent = "";
  const reason = $("approval-reason").value.trim();
  try {
    await api("POST", `/v1/tasks/${encodeURIComponent(current.id)}/approval`, {
      approval_id: form.dataset.approvalId,
      decision,
      reason: decision === "deny" && reason ? reason : null,
    });
    hideApproval(form.dataset.approvalId);
    setStatus("running");
  } catch (error) {
    $("approval-error").textContent = error.message;
  }
}

// -- side questions, cancel, the conversation ----------------------------------------------

async function askSide(event) {
  event.preventDefault();
  if (!current) return;
  const out = $("btw-answer");
  out.textContent = "asking…";
  try {
    const answer = await api("POST", `/v1/tasks/${encodeURIComponent(current.id)}/btw`, {
      question: $("btw-question").value,
    });
    out.textContent = answer.answer;
  } catch (error) {
    out.textContent = error.message;
  }
}

async function cancelTask() {
  if (!current) return;
  try {
    await api("POST", `/v1/tasks/${encodeURIComponent(current.id)}/cancel`);
  } catch (error) {
    $("task-error").textContent = error.message;
  }
}

async function loadConversation() {
  const session = $("session").value.trim();
  if (!session) return;
  try {
    const data = await api("GET", `/v1/sessions/${encodeURIComponent(session)}/messages`);
    const list = $("conversation");
    list.replaceChildren();
    for (const m of data.messages) {
      const item = document.createElement("li");
      item.dataset.role = m.role;
      item.dataset.kind = m.kind;
      const who = document.createElement("span");
      who.className = "who";
      who.textContent = m.kind === m.role ? m.role : `${m.role} · ${m.kind}`;
      const text = document.createElement("div");
      text.className = "text";
      text.textContent = m.text;
      item.append(who, text);
      list.append(item);
    }
  } catch (error) {
    $("start-error").textContent = error.message;
  }
}

function newSessionId() {
  const bytes = new Uint8Array(4);
  crypto.getRandomValues(bytes);
  return "s-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

document.addEventListener("DOMContentLoaded", () => {
  $("token").value = sessionStorage.getItem("errands.token") || "";
  $("token").addEventListener("change", () => sessionStorage.setItem("errands.token", $("token").value));
  $("session").value = localStorage.getItem("errands.session") || newSessionId();
  $("start-form").addEventListener("submit", startTask);
  $("watch-form").addEventListener("submit", followExisting);
  $("question").addEventListener("submit", (e) => { e.preventDefault(); sendAnswer("answered", collectAnswers()); });
  $("answer-dismiss").addEventListener("click", () => sendAnswer("answered", {}));
  $("answer-cancel").addEventListener("click", () => sendAnswer("cancelled", {}));
  $("approval-approve").addEventListener("click", () => sendApproval("approve"));
  $("approval-always").addEventListener("click", () => sendApproval("approve_always"));
  $("approval-deny").addEventListener("click", () => sendApproval("deny"));
  $("btw-form").addEventListener("submit", askSide);
  $("cancel").addEventListener("click", cancelTask);
  $("refresh").addEventListener("click", loadConversation);
  const match = location.hash.match(/^#task=(.+)$/);
  if (match) {
    $("watch-id").value = decodeURIComponent(match[1]);
    $("watch-form").requestSubmit();
  } else {
    loadConversation();
  }
});
