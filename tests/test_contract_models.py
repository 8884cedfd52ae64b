"""Every contract model is whole when its module is imported: no field names a class defined
further down its module. Pydantic would finish such a model only when it is first used, and
inside the workflow sandbox that can come too late: a local activity whose input named a model
defined below it had its result read as None on replay (found by tests/test_replay.py)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from pydantic import BaseModel

import errands.contracts

pytestmark = pytest.mark.fast


def contract_models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    for info in pkgutil.iter_modules(errands.contracts.__path__):
        module = importlib.import_module(f"errands.contracts.{info.name}")
        found += [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, BaseModel)
            and value.__module__ == module.__name__
        ]
    return found


def test_there_are_contract_models_to_check() -> None:
    assert len(contract_models()) > 50


@pytest.mark.parametrize("model", contract_models(), ids=lambda m: f"{m.__module__}.{m.__name__}")
def test_every_contract_model_is_complete_at_import(model: type[BaseModel]) -> None:
    assert model.__pydantic_complete__, f"{model.__name__} names a class defined after it"
