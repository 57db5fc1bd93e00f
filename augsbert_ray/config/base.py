"""Internal: what every spec section shares, the strict model base and the CPU/GPU amount types."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


RESOURCE_UNIT = 1e-4  # the smallest amount of a resource Ray schedules


def _schedulable(amount: float) -> float:
    if 0 < amount < RESOURCE_UNIT:
        raise ValueError(f"{amount:g} is below the smallest amount Ray schedules, {RESOURCE_UNIT:g}")
    return amount


# CPUs or GPUs that a Ray task, actor or worker asks for.
Cpus = Annotated[float, Field(gt=0), AfterValidator(_schedulable)]
Gpus = Annotated[float, Field(ge=0), AfterValidator(_schedulable)]
