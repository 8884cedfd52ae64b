"""Approvals (issue 16): a tool whose policy says so waits for the user before it runs.

A server's ``approval`` setting (``ERRANDS_MCP_SERVERS``) gives each tool a policy, from the
configuration only (the model cannot change it), pinned with the task's tool list:

- ``never`` (the default): the tool runs without asking;
- ``ask``: the call waits for the user; "approve always" lets every later call of that tool in
  the session run without asking;
- ``always``: every call waits for the user ("approve always" approves this call only);
- ``approver``: every call waits for a principal with the approver role (or an admin);
- ``two``: every call waits for two distinct principals, each its owner, an approver or an
  admin (four eyes): the first approval is recorded and the call waits on for the second.

Who may answer (SPEC §10; ``refusal``) is checked again here, under the client's own checks
(``errands.client._access``): an answer names who gave it (``ApprovalAnswer.by``), and one the
policy does not allow is refused and changes nothing. A denial by the owner, an admin or anyone
who may approve the call settles it at once, whatever its policy.

A waiting call shows as the task's ``pending_approval``; a frontend answers it with the
``answer_approval`` update (validated) or the ``submit_approval`` signal. A denial (with the
user's reason), a timeout and a headless task each give the model a text of its own, stored as
the call's result: the tool never ran.

What the user approves is the call itself (issue 23): ``request_of`` shows the exact arguments
the tool will receive, whole and canonicalised (``canonical_arguments``), with their size and
SHA-256 digest, all computed once in the activity that finds the call (``need_of``); the model's
explanation (``why``) travels beside them, bounded, as the model's words. An answer that names a
digest is refused unless it is the digest of the waiting call. A call too large to show
(``SHOWN_MAX_BYTES``) is refused to the model without asking anyone.

Workflows import this module: it stays free of I/O. The payloads are in
``errands.contracts.approvals``.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from errands.agent.arguments import read_arguments
from errands.contracts.approvals import (
    WHY_SHOWN,
    ApprovalAnswer,
    ApprovalNeed,
    ApprovalPolicy,
    ApprovalRequest,
    approvals_needed,
)
from errands.contracts.principals import Principal
from errands.contracts.visible import MAYBE_HIDDEN, hidden_in_approval

SHOWN_MAX_BYTES = 64 * 1024
"""The largest canonical call put to a person: about 1,500 indented lines, more than anyone reads
before approving. The canonical text travels in signals, in the task's state across
continue-as-new, in the log and in query answers, all under Temporal's 2 MB payload limit, and
escapes can make it six times the size of the arguments (a DEL is one byte, ``\u007f`` six): at
this bound the calls of a task's main agent and eight branches waiting at once stay under 600 KiB.
A larger call is refused (``too_large``), its tool not run, and the model asked to make it
smaller."""
INDENTED_MAX_BYTES = SHOWN_MAX_BYTES
"""Past this size the canonical arguments are written on one line instead of indented: deep
nesting indented two spaces a level could multiply the size of what the user must read."""


def need_of(index: int, tool: str, policy: ApprovalPolicy, raw: str, why: str) -> ApprovalNeed:
    """A call that waits for the user, canonicalised and hashed here, in the activity that
    finds it: what the person sees and the digest they answer are computed once, recorded in
    the activity's result, and never again in workflow code (whose replay may run on another
    Python, with other Unicode tables). A call whose canonical text is past
    ``SHOWN_MAX_BYTES`` carries the text the model reads instead (``refusal``)."""
    arguments = canonical_arguments(raw)
    encoded = arguments.encode("utf-8")
    digest = hashlib.sha256(encoded).hexdigest()
    if len(encoded) > SHOWN_MAX_BYTES:
        return ApprovalNeed(
            index=index,
            tool=tool,
            policy=policy,
            arguments="",
            arguments_sha256=digest,
            arguments_bytes=len(encoded),
            refusal=too_large(tool, len(encoded)),
        )
    return ApprovalNeed(
        index=index,
        tool=tool,
        policy=policy,
        arguments=arguments,
        arguments_sha256=digest,
        arguments_bytes=len(encoded),
        why=why,
    )


def request_of(
    need: ApprovalNeed, *, approval_id: str, where: str, requester: str, expires_at: datetime
) -> ApprovalRequest:
    if need.arguments_sha256:
        arguments, digest, size = need.arguments, need.arguments_sha256, need.arguments_bytes
    else:  # a need recorded before the activity canonicalised it: its arguments are raw
        arguments = canonical_arguments(need.arguments)
        encoded = arguments.encode("utf-8")
        digest, size = hashlib.sha256(encoded).hexdigest(), len(encoded)
    return ApprovalRequest(
        approval_id=approval_id,
        tool=need.tool,
        arguments=arguments,
        arguments_sha256=digest,
        arguments_bytes=size,
        why=_cut(need.why.strip(), WHY_SHOWN),
        policy=need.policy,
        where=where,
        requester=requester,
        expires_at=expires_at,
    )


def canonical_arguments(text: str) -> str:
    """A call's arguments as the user must see them: the object the tool receives (read by the
    one parser, ``errands.agent.arguments``), written again as JSON in the model's key order,
    indented two spaces (on one line past ``INDENTED_MAX_BYTES``), with every character inside
    its strings that does not show as itself (``errands.contracts.visible.hidden_in_approval``:
    controls, invisible and default-ignorable characters, spaces other than U+0020) escaped as
    ``\\uXXXX``. Whitespace the model put around the JSON (a carriage return and spaces, say)
    is gone; a space, a tab or a carriage return inside a string shows as what it is. Arguments
    the parser refuses (never asked about: such a call is not run) are shown as their raw text,
    escaped the same way."""
    value = read_arguments(text)
    if isinstance(value, str):
        return reveal(text)
    indented = reveal(json.dumps(value, ensure_ascii=False, indent=2))
    if len(indented) <= INDENTED_MAX_BYTES // 4 or len(indented.encode()) <= INDENTED_MAX_BYTES:
        return indented
    return reveal(json.dumps(value, ensure_ascii=False))


def reveal(text: str) -> str:
    """``text`` with every character that would not show as itself written as its JSON escape
    (a character past U+FFFF as its surrogate pair), so it stays valid JSON."""
    if not MAYBE_HIDDEN.search(text):
        return text
    return "".join(_escaped(c) if hidden_in_approval(c) else c for c in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def too_large(tool: str, size: int) -> str:
    return (
        f"Not approved: this call of {tool} needs the user's approval, but its arguments "
        f"({size:,} bytes as shown) are too large to show a person (at most "
        f"{SHOWN_MAX_BYTES:,} bytes), so it was not run and nobody was asked. Make the call "
        "smaller (split the work into smaller calls) if you still need it."
    )


def may_approve(policy: ApprovalPolicy, by: Principal | None, owner: str | None) -> bool:
    """Whether ``by`` may approve a call of ``policy`` in a task of ``owner``. ``by`` None (an
    answer from before principals) is the owner's: it may approve what the owner may, except
    where the policy needs to know who approves (``approver``, ``two``)."""
    if by is None:
        return policy in ("ask", "always")
    if by.is_admin:
        return True
    if policy in ("ask", "always"):
        return owner is None or by.id == owner
    if policy == "approver":
        return by.is_approver
    return by.id == owner or by.is_approver


def may_deny(policy: ApprovalPolicy, by: Principal | None, owner: str | None) -> bool:
    """Whether ``by`` may deny such a call: its owner (``by`` None is the owner's), an admin,
    or anyone who may approve it."""
    return by is None or by.id == owner or may_approve(policy, by, owner)


def refusal(
    request: ApprovalRequest, answer: ApprovalAnswer, owner: str | None, task_id: str
) -> str | None:
    """Why ``answer`` may not settle (or count toward) ``request``, in a task of ``owner``;
    None when it may."""
    by, policy, tool = answer.by, request.policy, request.tool
    who = "an answer that does not say who gave it" if by is None else str(by)
    if answer.decision == "deny":
        if may_deny(policy, by, owner):
            return None
        return f"{who} may not deny calls of {tool} in task {task_id}: {_asks_for(policy, owner)}"
    if answer.decision == "approve_always" and policy != "ask":
        return (
            f"{tool} asks before every call ({_policy_words(policy)}): approve this call once, "
            "or deny it"
        )
    if not may_approve(policy, by, owner):
        hint = (
            "; answer through errands (the client, the gateway or the CLI), which records who "
            "answers"
            if by is None
            else ""
        )
        return (
            f"{who} may not approve calls of {tool} in task {task_id}: "
            f"{_asks_for(policy, owner)}{hint}"
        )
    if by is not None and any(p.id == by.id for p in request.approved_by):
        return (
            f"{by.id} approved this call of {tool} already; it needs a second, different "
            "approver (its owner, an approver or an admin)"
        )
    return None


def still_needed(request: ApprovalRequest) -> int:
    """Approvals ``request`` still waits for before its call may run."""
    return max(0, approvals_needed(request.policy) - len(request.approved_by))


def _asks_for(policy: ApprovalPolicy, owner: str | None) -> str:
    owner_words = f"its owner ({owner})" if owner else "its owner"
    if policy == "approver":
        return "its policy asks for an approver (a principal with the approver or admin role)"
    if policy == "two":
        return (
            f"its policy asks for two different principals, each {owner_words}, an approver "
            "or an admin"
        )
    return f"only {owner_words} or an admin may answer"


def _policy_words(policy: ApprovalPolicy) -> str:
    return {
        "always": "approval 'always'",
        "approver": "approval 'approver': an approver answers each call",
        "two": "approval 'two': two principals approve each call",
    }.get(policy, f"approval {policy!r}")


def denied(tool: str, reason: str | None) -> str:
    why = f" Their reason: {reason.strip()}" if reason and reason.strip() else ""
    return (
        f"Not approved: the user denied this call of {tool}, so it was not run.{why} Do not "
        "call it again for the same purpose; go on without it or ask the user how to proceed."
    )


def timed_out(tool: str, hours: float) -> str:
    return (
        f"Not approved: nobody answered the request to run {tool} within {hours:g} h, so it "
        "was not run. Go on without it, or say in your answer what it would have done."
    )


def headless(tool: str) -> str:
    return (
        f"Not approved: {tool} needs the user's approval and this task runs headless, with "
        "nobody to ask, so it was not run. Go on without it."
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more)"
