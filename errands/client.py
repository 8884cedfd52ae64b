"""Temporal client construction: always with the pydantic data converter."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime


class TemporalUnreachable(RuntimeError):
    """No Temporal frontend answered at the address; the message says where and what to check."""


async def connect(
    address: str,
    namespace: str = "default",
    *,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> Client:
    try:
        return await Client.connect(
            address,
            namespace=namespace,
            data_converter=pydantic_data_converter,
            runtime=runtime,
            interceptors=interceptors,
        )
    except RuntimeError as error:  # what Client.connect raises when it cannot connect
        raise TemporalUnreachable(
            f"cannot connect to Temporal at {address} ({error}); check TEMPORAL_ADDRESS and "
            "that the server is up, or start the embedded stack with `errands dev`"
        ) from None
