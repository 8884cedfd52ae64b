// What each event of the log changes on the page: the round cards with their notes, the
// branches with their tools and live text, and the reply as it is written.

import { $, el } from "./api.js";
import {
  approvalRecorded,
  hideApproval,
  hideQuestion,
  showApproval,
  waitsForUser,
} from "./cards.js";
import { renderLive, renderMarkdown } from "./markdown.js";
import { page } from "./page.js";
import { loadConversation } from "./sessions.js";
import { countTokens, finish, loadQuestion, setStatus, showReceipt } from "./task.js";

const HANDLERS = {
  task_started: (w, e) => { w.summary = w.summary || e.text; },
  round_started: (w, e) => { w.round = e.round; roundCard(e.round); },
  model_call_started: modelCallStarted,
  model_call_finished: (w, e) => countTokens(w, e.usage),
  reply_delta: replyDelta,
  delegated: delegated,
  branch_started: (w, e) => setBranchStatus(branchCard(e.round, e.ordinal), "started"),
  branch_finished: branchFinished,
  tool_requested: (w, e) => toolLine(w, e, "running", "running"),
  tool_approved: (w, e) => toolLine(w, e, "approved", "approved"),
  tool_denied: (w, e) => toolLine(w, e, "denied", `not run: ${e.reason || "denied"}`),
  tool_finished: (w, e) => {
    const what = `${e.chars} characters`;
    const state = e.is_error ? "error" : "done";
    toolLine(w, e, state, `${state} (${what})`);
  },
  approval_requested: (w, e) => {
    if (!w.closed.has(e.approval_id) && !w.handled.has(e.approval_id)) {
      showApproval(w, e, w.round);
    }
  },
  approval_recorded: (w, e) => {
    // The first of two approvals: the card stays, showing who has approved so far.
    approvalRecorded(w, e);
    const of = e.approved_by.length + e.waiting_for;
    note(w.round, `${e.by.id} approved ${e.tool} (${e.approved_by.length} of ${of})`);
  },
  approval_answered: (w, e) => closeCard(w, e.approval_id, () => hideApproval(e.approval_id)),
  question_asked: (w, e) => { loadQuestion(w, e); },
  question_answered: (w, e) => {
    closeCard(w, e.question_set_id, () => hideQuestion(e.question_set_id));
  },
  message_received: (w, e) => note(w.round, `you sent a message (${e.mode})`),
  message_delivered: messageDelivered,
  compaction: (w, e) => {
    const covers = e.covers ? ` (${e.covers[0]}–${e.covers[1]})` : "";
    note(w.round, `earlier messages summarised${covers}`);
  },
  replied: (w) => finish(w, "replied"),
  failed: (w, e) => {
    $("task-error").textContent = `${e.kind}: ${e.message}`;
    finish(w, "failed");
  },
  canceled: (w) => finish(w, "canceled"),
  notification_sent: (w, e) => {
    const tries = e.attempts === 1 ? "" : ` after ${e.attempts} attempts`;
    note(w.round, `notified ${e.host} that the task is ${notified(e.event)}${tries}`);
  },
  notification_failed: (w, e) => {
    const where = e.host ? ` ${e.host}` : "";
    note(w.round, `could not notify${where} (${e.target}): ${e.detail}`);
  },
};

// How a notification names the change it told of.
function notified(event) {
  return event === "waiting_for_user" ? "waiting for you" : event;
}

// A question or approval the log says waits no more: its card goes, and the task runs on
// unless another card waits.
function closeCard(watch, id, hide) {
  watch.closed.add(id);
  hide();
  if (!watch.ended && !waitsForUser()) setStatus("running");
}

export function applyEvent(watch, event) {
  (HANDLERS[event.type] || (() => {}))(watch, event);
}

function roundCard(round) {
  let card = document.querySelector(`#rounds > li[data-round="${round}"]`);
  if (card) return card;
  card = el(
    "li",
    { testid: "round", "aria-label": `Round ${round}` },
    el("h4", {}, `Round ${round}`),
    el("p", { class: "ack", testid: "ack" }),
    el("ul", { class: "notes", testid: "round-notes" }),
    el("ul", { class: "branches", testid: "branches" }),
  );
  card.dataset.round = String(round);
  const later = [...$("rounds").children].find((c) => Number(c.dataset.round) > round);
  $("rounds").insertBefore(card, later || null);
  return card;
}

export function note(round, text) {
  const line = el("li", { class: "note" }, text);
  roundCard(round).querySelector(".notes").append(line);
  return line;
}

function branchCard(round, ordinal) {
  const key = `${round}-${ordinal}`;
  let card = document.querySelector(`li[data-branch="${key}"]`);
  if (card) return card;
  card = el(
    "li",
    { testid: "branch", "aria-label": `Round ${round}, subtask ${ordinal}` },
    el(
      "div",
      { class: "branch-head" },
      el("span", { class: "branch-title", testid: "branch-title" }, `#${ordinal}`),
      " — ",
      el("span", { class: "branch-state", testid: "branch-state" }),
      el("span", { class: "branch-activity muted", testid: "branch-activity" }),
    ),
    el("ul", { class: "branch-tools", testid: "branch-tools" }),
    el("div", { class: "md branch-text", testid: "branch-text" }),
  );
  card.dataset.branch = key;
  setBranchStatus(card, "waiting");
  const list = roundCard(round).querySelector(".branches");
  const later = [...list.children].find((c) => Number(c.dataset.branch.split("-")[1]) > ordinal);
  list.insertBefore(card, later || null);
  return card;
}

function setBranchStatus(card, status) {
  if (card.dataset.status === "completed" || card.dataset.status === "failed") return; // final
  card.dataset.status = status;
  card.querySelector(".branch-state").textContent = status;
}

function delegated(watch, e) {
  $("task-phase").textContent = `round ${e.round}: waiting for ${e.subtasks} subtasks`;
  const card = roundCard(e.round);
  card.querySelector(".ack").textContent = e.reply || "";
  for (let k = 1; k <= (e.subtasks || 0); k += 1) branchCard(e.round, k);
  labelBranches(watch, e.round);
}

// The event names only how many subtasks there are; the acknowledgement in the session holds
// each one's type and prompt.
async function labelBranches(watch, round) {
  const rows = await loadConversation();
  const ack = rows.find((r) => r.id === `task:${watch.id}:round:${round}:ack`);
  if (!ack || page.current !== watch) return;
  roundCard(round).querySelector(".ack").textContent = ack.text; // the event holds a preview
  (ack.meta.subtasks || []).forEach((sub, index) => {
    const title = branchCard(round, index + 1).querySelector(".branch-title");
    title.textContent = `#${index + 1} ${sub.type}: ${sub.prompt}`;
  });
}

function branchFinished(watch, e) {
  const card = branchCard(e.round, e.ordinal);
  setBranchStatus(card, e.status);
  card.querySelector(".branch-activity").textContent = "";
  renderMarkdown(card.querySelector(".branch-text"), e.output || "");
  loadConversation();
}

function modelCallStarted(watch, e) {
  takeLiveText(watch, e);
  const branch = parseWhere(e.where);
  const retry = e.attempt > 1 ? `, attempt ${e.attempt}` : "";
  if (branch) {
    const card = branchCard(branch.round, branch.ordinal);
    setBranchStatus(card, "started");
    const activity = card.querySelector(".branch-activity");
    activity.textContent = ` · step ${e.step + 1}: ${e.model}${retry}`;
  } else {
    $("task-phase").textContent = `the agent thinks (${e.model}${retry})`;
  }
  showLive(watch, e.where);
}

function replyDelta(watch, e) {
  if (takeLiveText(watch, e)) showLive(watch, e.where);
}

// One text per step (where, step), of its latest attempt, as errands.contracts.events.LiveText keeps it:
// a later attempt's model_call_started or delta, or a superseded marker (a retried attempt
// says so first, with no text), starts the text over; an earlier attempt's late delta is
// dropped. False when the event changes nothing.
function takeLiveText(watch, e) {
  const key = `${e.where}#${e.step}`;
  const shown = watch.live.get(key) || { attempt: 0, text: "" };
  if (e.attempt < shown.attempt) return false;
  const kept = e.attempt > shown.attempt || e.superseded ? "" : shown.text;
  const added = e.type === "reply_delta" && !e.superseded ? e.text || "" : "";
  watch.live.set(key, { attempt: e.attempt, text: kept + added });
  // The latest step started is the one being written: an earlier step's text (a reply the
  // agent discarded, say) is no longer shown.
  if (!(watch.shownStep.get(e.where) > e.step)) watch.shownStep.set(e.where, e.step);
  return true;
}

function showLive(watch, where) {
  const live = watch.live.get(`${where}#${watch.shownStep.get(where)}`);
  const text = live ? live.text : "";
  const branch = parseWhere(where);
  if (branch) {
    const card = branchCard(branch.round, branch.ordinal);
    if (card.dataset.status === "completed" || card.dataset.status === "failed") return;
    renderLive(card.querySelector(".branch-text"), text); // only the block being written
    return;
  }
  if (watch.final) return;
  $("reply-box").hidden = !text;
  $("reply-writing").hidden = !text;
  $("reply").dataset.state = "writing";
  $("reply").setAttribute("aria-busy", "true"); // read it out once it is written
  renderLive($("reply"), text); // finished blocks stay; only the one being written is redone
}

function toolLine(watch, e, state, label) {
  const branch = parseWhere(e.where);
  const key = e.cause || `${e.where}:${e.tool}`;
  const holder = branch
    ? branchCard(branch.round, branch.ordinal).querySelector(".branch-tools")
    : roundCard(watch.round).querySelector(".notes");
  let line = [...holder.children].find((li) => li.dataset.call === key);
  if (!line) {
    const state = el("span", { class: "tool-state" });
    line = el("li", { class: "tool", testid: "tool" }, el("code", {}, e.tool), " ", state);
    line.dataset.call = key;
    line.dataset.tool = e.tool;
    holder.append(line);
  }
  line.dataset.state = state;
  line.querySelector(".tool-state").textContent = label;
  if (e.arguments) line.title = e.arguments;
}

function messageDelivered(watch, e) {
  const accepted = watch.receipts.get(e.message_id);
  if (accepted === undefined) return; // sent from elsewhere
  const outcome =
    e.outcome === "delivered" ? "Delivered: the agent has read it." : `Outcome: ${e.outcome}.`;
  showReceipt(e.message_id, e.outcome, `${accepted} ${outcome}`);
}

function parseWhere(where) {
  // "r{round}/b{ordinal}" names a branch; anything else is the main agent.
  const m = /^r(\d+)\/b(\d+)$/.exec(where || "");
  return m ? { round: Number(m[1]), ordinal: Number(m[2]) } : null;
}
