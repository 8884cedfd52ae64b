// The task followed: its panel (id, status, phase, cost, the Temporal link, the message
// receipt), its event stream started and stopped, and how it ends. What the page shows while
// the task runs comes from its event log alone; the task's state is read only for a question's
// text (the log names the question set it asked) and once at the end (its cost, its next task).

import { $, api, taskPath } from "./api.js";
import { hideApproval, hideQuestion, showQuestion } from "./cards.js";
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
const QUESTION_RETRY_MS = 100; // the log says a question was asked a moment before it is open
const QUESTION_RETRY_MAX_MS = 2000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

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
    closed: new Set(), // question and approval ids the log says wait no more
    receipts: new Map(), // message id -> "Accepted as …", for messages sent from this page
    tokens: { input: 0, output: 0 }, // of the model calls finished so far
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
}

export function stop(watch) {
  watch.ended = true;
  if (watch.abort) watch.abort.abort();
}

// Stops following the task and empties its panel, the forms' texts included: after a sign-out
// nothing of the task stays on the page, shown or hidden.
export function forgetTask() {
  if (page.current) stop(page.current);
  page.current = null;
  resetTaskPanel("");
  $("task").hidden = true;
  const texts = ["approval-tool", "approval-where", "approval-why", "approval-arguments"];
  texts.push("approval-size", "approval-sha256", "approval-verified", "approval-error");
  texts.push("approval-policy", "approval-waiting"); // who approved so far (policy two)
  for (const id of [...texts, "answer-error", "next-task"]) $(id).textContent = "";
  for (const id of ["approval-policy", "approval-waiting"]) $(id).hidden = true;
  for (const id of ["message-text", "btw-question", "approval-reason"]) $(id).value = "";
  const card = $("approval").dataset; // what the card held of the call and its approvers
  for (const key of ["approvalId", "sha256", "policy", "needed", "mine"]) delete card[key];
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

// -- the task's state: a question's text, and the cost and next task at the end ---------------

async function refreshState(watch) {
  const state = await readState(watch);
  if (state && page.current === watch) applyState(state);
  return state;
}

async function readState(watch) {
  try {
    return await api("GET", taskPath(watch.id));
  } catch (error) {
    if (page.current === watch && !watch.ended) $("task-phase").textContent = error.message;
    return null;
  }
}

function applyState(state) {
  $("task-cost").textContent = costText(state);
  if (state.next_task) {
    $("next-task-line").hidden = false;
    $("next-task").textContent = state.next_task;
  }
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

// The tokens of a finished model call (model_call_finished), added up while the task runs; the
// cost in dollars comes with the state at the end.
export function countTokens(watch, usage) {
  watch.tokens.input += (usage && usage.input_tokens) || 0;
  watch.tokens.output += (usage && usage.output_tokens) || 0;
  $("task-cost").textContent = `${watch.tokens.input} tokens in, ${watch.tokens.output} out`;
}

// The question set a question_asked event names, as the task holds it (its questions and
// options are not in the log): read once it is open, unless the log has closed it meanwhile.
export async function loadQuestion(watch, asked) {
  const id = asked.question_set_id;
  let delay = QUESTION_RETRY_MS;
  while (page.current === watch && !watch.ended && !watch.closed.has(id)) {
    const state = await readState(watch);
    const question = state && state.pending_question;
    if (question) {
      const open = question.id === id && !watch.closed.has(id) && !watch.handled.has(id);
      if (open && page.current === watch && !watch.ended) {
        showQuestion(watch, question, asked.round);
      }
      return; // or another question waits: its own event shows it
    }
    await sleep(delay);
    delay = Math.min(delay * 2, QUESTION_RETRY_MAX_MS);
  }
}
