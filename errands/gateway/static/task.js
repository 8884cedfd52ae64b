// The task followed: its panel (id, status, phase, cost, the Temporal link, the message
// receipt), its event stream and state polls started and stopped, and how it ends.

import { $, api, taskPath } from "./api.js";
import { hideApproval, hideQuestion, showApproval, showQuestion } from "./cards.js";
import { stream } from "./events.js";
import { renderMarkdown } from "./markdown.js";
import { page } from "./page.js";
import { applyEvent } from "./rounds.js";
import {
  loadConversation,
  loadSessions,
  openSession,
  renderSessions,
  renderSessionTasks,
} from "./sessions.js";

const TERMINAL = new Set(["replied", "failed", "canceled"]);
const STATE_POLL_MS = 1500; // questions and approvals have no event of their own: poll the state

function newWatch(id, session, summary) {
  return {
    id,
    session,
    summary,
    lastSeq: 0, // the largest seq applied: sent back as Last-Event-ID on a reconnect
    seen: new Set(), // every seq applied, so a repeated event is dropped
    ended: false,
    abort: null,
    round: 0, // the round of the main agent's events (they name no round)
    live: new Map(), // "where#step" -> {attempt, text}: the text each model call writes
    shownStep: new Map(), // where -> the step whose text is shown
    final: false, // the stored reply is shown: live text no longer replaces it
    handled: new Set(), // question and approval ids answered from this page
    noted: new Set(), // question and approval ids already noted in their round
    receipts: new Map(), // message id -> "Accepted as …", for messages sent from this page
    stateTimer: null,
    reading: false, // a state read is under way
    again: false, // read the state again once it is done
  };
}

export function follow(taskId, session, summary) {
  if (page.current) stop(page.current);
  page.current = newWatch(taskId, session, summary);
  history.replaceState(null, "", `#task=${encodeURIComponent(taskId)}`);
  resetTaskPanel(taskId);
  if (session && (!page.convo || page.convo.session !== session)) openSession(session);
  renderSessions();
  renderSessionTasks();
  stream(page.current, { event: applyEvent, ended: endedWithoutLastEvent });
  pollState(page.current);
}

export function stop(watch) {
  watch.ended = true;
  if (watch.abort) watch.abort.abort();
  clearTimeout(watch.stateTimer);
}

function resetTaskPanel(taskId) {
  $("task").hidden = false;
  $("task-id").textContent = taskId;
  for (const id of ["rounds", "event-log", "reply"]) $(id).replaceChildren();
  const texts = ["task-error", "task-phase", "task-cost", "message-receipt", "message-error"];
  for (const id of [...texts, "btw-answer"]) $(id).textContent = "";
  $("event-count").textContent = "0";
  $("reply-box").hidden = true;
  $("reply-writing").hidden = true;
  $("reply").removeAttribute("aria-busy");
  delete $("reply").dataset.state;
  $("next-task-line").hidden = true;
  $("cancel").hidden = false;
  hideQuestion();
  hideApproval();
  setStatus("running");
  temporalLink(taskId);
}

export function temporalLink(taskId) {
  const a = $("temporal-link");
  a.hidden = !(page.info && page.info.temporal_ui);
  if (a.hidden) return;
  const base = page.info.temporal_ui.replace(/\/+$/, "");
  const namespace = encodeURIComponent(page.info.namespace);
  a.href = `${base}/namespaces/${namespace}/workflows/${encodeURIComponent(taskId)}`;
}

export function setStatus(status) {
  const badge = $("task-status");
  badge.textContent = status.replace(/_/g, " ");
  badge.dataset.status = status;
}

export function showReceipt(messageId, status, text) {
  const receipt = $("message-receipt");
  receipt.dataset.messageId = messageId;
  receipt.dataset.status = status;
  receipt.textContent = text;
}

export async function finish(watch, status) {
  watch.ended = true;
  clearTimeout(watch.stateTimer);
  setStatus(status);
  $("cancel").hidden = true;
  $("task-phase").textContent = "";
  hideQuestion();
  hideApproval();
  const [rows, state] = await Promise.all([loadConversation(), refreshState(watch)]);
  if (page.current !== watch) return;
  const stored = rows.find((r) => r.id === `task:${watch.id}:reply`);
  const reply = stored ? stored.text : state && state.reply;
  if (reply) {
    watch.final = true;
    $("reply-box").hidden = false;
    $("reply-writing").hidden = true;
    $("reply").dataset.state = "final";
    renderMarkdown($("reply"), reply);
  } else if (status !== "replied") {
    $("reply-box").hidden = true; // no reply: the half-written text is not one
  }
  $("reply").setAttribute("aria-busy", "false");
  if (state && state.error && !$("task-error").textContent) {
    $("task-error").textContent = `${state.error.kind}: ${state.error.message}`;
  }
  loadSessions();
}

// A task that ended with no last event in its log (one from before the log): its state says how.
async function endedWithoutLastEvent(watch) {
  const state = await refreshState(watch);
  const status = state && TERMINAL.has(state.status) ? state.status : "replied";
  await finish(watch, status);
}

// -- the task's state: cost, phase, questions and approvals -------------------------------------

async function refreshState(watch) {
  try {
    const state = await api("GET", taskPath(watch.id));
    if (page.current === watch) applyState(watch, state);
    return state;
  } catch (error) {
    if (page.current === watch && !watch.ended) $("task-phase").textContent = error.message;
    return null;
  }
}

function applyState(watch, state) {
  $("task-cost").textContent = costText(state);
  if (state.next_task) {
    $("next-task-line").hidden = false;
    $("next-task").textContent = state.next_task;
  }
  if (watch.ended) return;
  if (state.phase) $("task-phase").textContent = state.phase;
  if (state.status === "running" || state.status === "waiting_for_user") setStatus(state.status);
  const question = state.pending_question;
  if (question && !watch.handled.has(question.id)) showQuestion(watch, question, state.round);
  else if (!question) hideQuestion();
  const approval = state.pending_approval;
  if (approval && !watch.handled.has(approval.approval_id)) {
    showApproval(watch, approval, state.round);
  }
  else if (!approval) hideApproval();
}

function costText(state) {
  const total = { input: 0, output: 0 };
  for (const perModel of Object.values((state.usage && state.usage.parts) || {})) {
    for (const usage of Object.values(perModel)) {
      total.input += usage.input_tokens || 0;
      total.output += usage.output_tokens || 0;
    }
  }
  return `$${(state.cost_usd || 0).toFixed(4)} · ${total.input} tokens in, ${total.output} out`;
}

// Polls the state while the task runs, and sooner when an event says it changed. One read at a
// time: an event during a read asks for another one right after it.
async function pollState(watch) {
  clearTimeout(watch.stateTimer);
  if (watch.ended || page.current !== watch) return;
  if (watch.reading) {
    watch.again = true;
    return;
  }
  watch.reading = true;
  await refreshState(watch);
  watch.reading = false;
  if (watch.ended || page.current !== watch) return;
  clearTimeout(watch.stateTimer);
  watch.stateTimer = setTimeout(() => pollState(watch), watch.again ? 100 : STATE_POLL_MS);
  watch.again = false;
}

export function scheduleState(watch) {
  if (watch.reading) {
    watch.again = true;
    return;
  }
  clearTimeout(watch.stateTimer);
  watch.stateTimer = setTimeout(() => pollState(watch), 100); // several events come at once
}
