"""A round's decision as the workflow accepted it, and what a workflow knows of a subtask type.

``errands.agent.control`` parses a control call into these; ``errands.agent.subtask_types``
holds the types themselves (their code and tools never cross a payload)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class ReplyDecision(BaseModel):
    kind: Literal["reply"] = "reply"
    text: str


class SubtaskDraft(BaseModel):
    type: str
    prompt: str
    references: list[int] = Field(default_factory=list)
    """Catalog indexes, validated and sorted."""
    params: dict[str, Any] = Field(default_factory=dict)


class DelegateDecision(BaseModel):
    kind: Literal["delegate"] = "delegate"
    reply: str
    subtasks: list[SubtaskDraft]


RoundDecision = ReplyDecision | DelegateDecision
"""What a round decided: reply, or delegate these subtasks."""


class SubtaskTypeInfo(BaseModel):
    """What a workflow needs to know of a type: enough to validate a delegation, no code."""

    key: str
    description: str
    params_schema: dict[str, Any] | None = None
    model: str | None = None
