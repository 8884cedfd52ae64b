// The cards that wait for the user: the agent's questions (a picker, or free text) and a tool
// call's approval, shown from the event log (question_asked, approval_requested; a question's
// text is read from the task) and answered through the API. A call of policy two says how many
// of its two approvals it has; after this page's approval it waits for a second approver.

import { $, api, el, taskPath } from "./api.js";
import { page } from "./page.js";
import { note } from "./rounds.js";
import { setStatus } from "./task.js";

const OTHER = "Other";

// -- the question picker ---------------------------------------------------------------------

export function showQuestion(watch, question, round) {
  const form = $("question");
  if (!form.hidden && form.dataset.questionSetId === question.id) return; // keep what is chosen
  form.dataset.questionSetId = question.id;
  $("question-body").replaceChildren(...question.questions.map(questionField));
  $("answer-error").textContent = "";
  form.hidden = false;
  setStatus("waiting_for_user");
  $("task-phase").textContent = "waiting for your answer";
  if (!watch.noted.has(question.id)) {
    watch.noted.add(question.id);
    note(round, `asked you: ${question.questions.map((q) => q.header).join(", ")}`);
  }
}

export function hideQuestion(questionSetId) {
  const form = $("question");
  if (questionSetId && form.dataset.questionSetId !== questionSetId) return;
  form.hidden = true;
  $("question-body").replaceChildren();
}

function questionField(q) {
  const prompt = q.question + (q.multi_select ? " (choose any)" : "");
  const set = el("fieldset", {}, el("legend", {}, q.header), el("p", {}, prompt));
  set.dataset.qid = q.id;
  set.dataset.type = q.type;
  if (q.type === "text") {
    set.append(el("textarea", { name: q.id, rows: "2", "aria-label": q.header }));
    return set;
  }
  for (const option of q.options) set.append(optionLabel(q, option));
  return set;
}

function optionLabel(q, option) {
  const input = el("input", { type: q.multi_select ? "checkbox" : "radio", name: q.id });
  input.value = option.free_text ? "" : option.label;
  input.dataset.freeText = option.free_text ? "1" : "";
  const label = el("label", { class: "option" }, input, " " + option.label);
  if (option.description && !option.free_text) {
    label.append(el("small", {}, " — " + option.description));
  }
  if (option.free_text) {
    const other = el("input", {
      type: "text",
      class: "other",
      placeholder: "your own answer",
      "aria-label": `${q.header}: your own answer`,
    });
    other.addEventListener("input", () => { if (other.value) input.checked = true; });
    label.append(" ", other);
  }
  return label;
}

export function collectAnswers() {
  const answers = {};
  for (const set of $("question-body").querySelectorAll("fieldset")) {
    const qid = set.dataset.qid;
    const values = [];
    if (set.dataset.type === "text") {
      const text = set.querySelector("textarea").value.trim();
      if (text) values.push(text);
    } else {
      for (const input of set.querySelectorAll("input:checked")) {
        if (!input.dataset.freeText) values.push(input.value);
        else {
          const text = input.parentElement.querySelector("input.other").value.trim();
          values.push(text ? `${OTHER}: ${text}` : OTHER); // a bare "Other" is refused, saying why
        }
      }
    }
    answers[qid] = values;
  }
  return answers;
}

export async function sendAnswer(status, answers) {
  const watch = page.current;
  const id = $("question").dataset.questionSetId;
  $("answer-error").textContent = "";
  try {
    await api("POST", taskPath(watch.id, "/answer"), { question_set_id: id, status, answers });
    watch.handled.add(id);
    hideQuestion();
    const cancelled = status === "cancelled";
    note(watch.round, cancelled ? "you withdrew the question" : "your answer was taken");
    if (!waitsForUser()) setStatus("running");
  } catch (error) {
    $("answer-error").textContent = error.message;
  }
}

// -- approvals ---------------------------------------------------------------------------------

export function showApproval(watch, approval, round) {
  const form = $("approval");
  if (!form.hidden && form.dataset.approvalId === approval.approval_id) return;
  form.dataset.approvalId = approval.approval_id;
  form.dataset.tool = approval.tool;
  $("approval-tool").textContent = approval.tool;
  const where = approval.where === "main" ? "the main agent" : approval.where;
  $("approval-where").textContent = `(${where})`;
  $("approval-why").textContent = approval.why || "";
  $("approval-why-block").hidden = !approval.why;
  // textContent only: the arguments are shown as the text they are, never as markup.
  $("approval-arguments").textContent = approval.arguments;
  const size = approval.arguments_bytes;
  $("approval-size").textContent =
    size === undefined || size === null ? "size not recorded" : `${size.toLocaleString("en")} bytes`;
  $("approval-sha256").textContent = approval.arguments_sha256 || "not recorded";
  form.dataset.sha256 = approval.arguments_sha256 || "";
  verifyDigest(approval);
  $("approval-always").hidden = !approval.can_approve_always;
  $("approval-reason").value = "";
  $("approval-error").textContent = "";
  form.dataset.policy = approval.policy || "";
  form.dataset.needed = String(approval.approvals_needed || (approval.policy === "two" ? 2 : 1));
  showApprovers(approval.approved_by || []);
  // The event says the policy, not who has approved since: the task says that.
  if (approval.policy === "two" && !approval.approved_by) approversNow(watch, approval.approval_id);
  form.hidden = false;
  setStatus("waiting_for_user");
  $("task-phase").textContent = `waiting for your approval of ${approval.tool}`;
  if (!watch.noted.has(approval.approval_id)) {
    watch.noted.add(approval.approval_id);
    note(round, `asks to run ${approval.tool}`);
  }
}

// Whether the arguments shown hash to the digest shown (crypto.subtle: a secure context only).
async function verifyDigest(approval) {
  const mark = $("approval-verified");
  mark.className = "";
  mark.textContent = "";
  if (!approval.arguments_sha256) return;
  if (!globalThis.crypto?.subtle) {
    mark.textContent = "(not checked here: this page is not a secure context)";
    return;
  }
  const bytes = new TextEncoder().encode(approval.arguments);
  const hash = await crypto.subtle.digest("SHA-256", bytes);
  const hex = Array.from(new Uint8Array(hash), (b) => b.toString(16).padStart(2, "0")).join("");
  if ($("approval").dataset.approvalId !== approval.approval_id) return; // another call now
  if (hex === approval.arguments_sha256) {
    mark.textContent = "✓ matches the arguments shown";
  } else {
    mark.className = "mismatch";
    mark.textContent = `⚠ DOES NOT MATCH the arguments shown (they hash to ${hex}): do not approve`;
  }
}

// Who the call needs, and for policy two who has approved so far: "needs two approvers: 1 of 2
// (alice)". A gateway from before four eyes sends no policy: then the card says nothing of it.
// The lines are made here when the page's HTML has none (a cached index.html).
function showApprovers(approvedBy, byThisPage = false) {
  const form = $("approval");
  const policy = form.dataset.policy;
  const needed = Number(form.dataset.needed) || 1;
  const line = approvalLine("approval-policy", "muted");
  if (policy === "two" || needed > 1) {
    const names = approvedBy.length ? ` (${approvedBy.map((p) => p.id).join(", ")})` : "";
    line.textContent = `needs two approvers: ${approvedBy.length} of ${needed}${names}`;
  } else if (policy === "approver") {
    line.textContent = "for an approver";
  } else {
    line.textContent = "";
  }
  line.hidden = !line.textContent;
  // A principal counts once: whoever has approved waits for someone else.
  const mine = byThisPage || Boolean(page.me && approvedBy.some((p) => p.id === page.me.id));
  const waiting = approvalLine("approval-waiting", "");
  waiting.textContent = mine
    ? "Your approval is recorded. The call does not run yet: it waits for a second, " +
      "different approver."
    : "";
  waiting.hidden = !mine;
  form.dataset.mine = mine ? "1" : "";
  $("approval-approve").hidden = mine;
  if (mine) $("approval-always").hidden = true;
  if (mine) $("task-phase").textContent = "waiting for a second approver";
}

// Who has approved the call shown so far, as the task holds it (a page opened after the first
// approval of a call of policy two); the card keeps what it shows if the task cannot say.
async function approversNow(watch, approvalId) {
  let pending;
  try {
    pending = (await api("GET", taskPath(watch.id))).pending_approval;
  } catch {
    return;
  }
  const form = $("approval");
  const same = form.dataset.approvalId === approvalId && !form.hidden && !form.dataset.mine;
  if (page.current !== watch || !same || !pending || pending.approval_id !== approvalId) return;
  form.dataset.needed = String(pending.approvals_needed || 2);
  showApprovers(pending.approved_by || []);
}

function approvalLine(id, cls) {
  let line = $(id);
  if (!line) {
    line = el("p", { id, class: cls, testid: id, role: "status" });
    $("approval-where").parentElement.after(line);
  }
  return line;
}

// An approval_recorded event: the call waits on for another approver; the card says who
// approved so far (policy two), or shows the call if this page had not.
export function approvalRecorded(watch, recorded) {
  const form = $("approval");
  if (form.hidden || form.dataset.approvalId !== recorded.approval_id) return;
  form.dataset.needed = String(recorded.approved_by.length + recorded.waiting_for);
  showApprovers(recorded.approved_by);
}

export function hideApproval(approvalId) {
  const form = $("approval");
  if (!approvalId || form.dataset.approvalId === approvalId) form.hidden = true;
}

export function waitsForUser() {
  return !$("question").hidden || !$("approval").hidden;
}

export async function sendApproval(decision) {
  const watch = page.current;
  const id = $("approval").dataset.approvalId;
  const reason = $("approval-reason").value.trim();
  $("approval-error").textContent = "";
  try {
    const receipt = await api("POST", taskPath(watch.id, "/approval"), {
      approval_id: id,
      decision,
      // The digest of what this page showed: the answer is refused for any other arguments.
      arguments_sha256: $("approval").dataset.sha256 || null,
      reason: decision === "deny" && reason ? reason : null,
    });
    if (receipt && receipt.waiting_for > 0 && $("approval").dataset.approvalId === id) {
      // Policy two, the first approval: recorded, and the call waits for someone else.
      $("approval").dataset.needed = String(receipt.approved_by.length + receipt.waiting_for);
      showApprovers(receipt.approved_by, true);
      return;
    }
    watch.handled.add(id);
    hideApproval(id);
    if (!waitsForUser()) setStatus("running");
  } catch (error) {
    $("approval-error").textContent = error.message;
  }
}
