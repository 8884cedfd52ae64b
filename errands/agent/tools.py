"""Work tools made from typed Python functions: ``@errands.tool``.

The tool's name is the function's, its description the docstring's first paragraph, and the JSON
schema of its arguments comes from the signature (a pydantic model built from the parameters'
annotations and defaults) or, when the function takes one pydantic model, from that model. A
model's arguments are validated against the same model before the function runs; arguments that
do not fit raise ``ModelMistake``, whose message the model reads to call again.

::

    @errands.tool
    def convert(amount: float, source: str, target: str) -> float:
        \"\"\"Convert an amount of money between currencies.\"\"\"
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Callable
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_json

from errands.agent.subtask_types import WorkTool
from errands.contracts.messages import ToolSpec
from errands.errors import ModelMistake

ToolDecorator = Callable[[Callable[..., Any]], WorkTool]


@overload
def tool(function: Callable[..., Any], /) -> WorkTool: ...


@overload
def tool(*, name: str | None = None, description: str | None = None) -> ToolDecorator: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> WorkTool | ToolDecorator:
    """A work tool from a plain or async function; ``@tool`` or ``@tool(name=…, description=…)``.

    Sync functions run in a thread, so a slow one does not hold up the worker's event loop.
    A returned ``str`` reaches the model as it is; anything else as JSON.
    """

    def make(fn: Callable[..., Any]) -> WorkTool:
        return _FunctionTool(fn, name=name, description=description).work_tool()

    return make(function) if function is not None else make


class _FunctionTool:
    def __init__(
        self, fn: Callable[..., Any], *, name: str | None, description: str | None
    ) -> None:
        self._fn = fn
        self._name = name or fn.__name__
        self._description = description or _first_paragraph(fn)
        if not self._description:
            raise TypeError(
                f"tool {self._name!r} has no description: give {fn.__qualname__} a docstring "
                "or pass @tool(description=...); the model reads it to decide when to call"
            )
        self._parameters = list(inspect.signature(fn).parameters.values())
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except NameError as error:
            raise TypeError(
                f"tool {self._name!r}: an annotation does not resolve ({error}); define the "
                "types its parameters use at module level"
            ) from None
        single = hints.get(self._parameters[0].name) if len(self._parameters) == 1 else None
        self._arguments: type[BaseModel]
        if inspect.isclass(single) and issubclass(single, BaseModel):
            self._single_model, self._arguments = True, single
        else:
            self._single_model, self._arguments = False, self._model_of_signature(hints)

    def work_tool(self) -> WorkTool:
        schema = self._arguments.model_json_schema()
        schema.pop("title", None)
        return WorkTool(
            spec=ToolSpec(name=self._name, description=self._description, parameters=schema),
            run=self.run,
            function=self._fn,
        )

    def _model_of_signature(self, hints: dict[str, Any]) -> type[BaseModel]:
        fields: dict[str, Any] = {}
        for index, parameter in enumerate(self._parameters):
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise TypeError(
                    f"tool {self._name!r} takes *{parameter.name}: a tool's arguments are a JSON "
                    "object, so give every parameter a name (or take one pydantic model)"
                )
            default = ... if parameter.default is parameter.empty else parameter.default
            # Fields under neutral names, aliased to the parameters': a parameter may be
            # called `json` or `schema`, which a pydantic field may not.
            fields[f"p{index}"] = (
                hints.get(parameter.name, Any),
                Field(default, alias=parameter.name),
            )
        return create_model(
            f"{self._name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )

    async def run(self, arguments: dict[str, Any]) -> str:
        try:
            validated = self._arguments.model_validate(arguments)
        except ValidationError as error:
            raise ModelMistake(self._mistake(error)) from None
        args: list[Any] = [validated] if self._single_model else []
        kwargs: dict[str, Any] = {}
        if not self._single_model:
            for index, parameter in enumerate(self._parameters):
                value = getattr(validated, f"p{index}")
                if parameter.kind == parameter.POSITIONAL_ONLY:
                    args.append(value)
                else:
                    kwargs[parameter.name] = value
        if inspect.iscoroutinefunction(self._fn):
            result = await self._fn(*args, **kwargs)
        else:
            result = await asyncio.to_thread(self._fn, *args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        return _as_text(result)

    def _mistake(self, error: ValidationError) -> str:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}"
            for e in error.errors(include_url=False)
        )
        return (
            f"the arguments of {self._name} do not fit its schema ({problems}); "
            f"call {self._name} again with corrected arguments"
        )


def _first_paragraph(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return to_json(result).decode()
