"""Internal: what the Ray cluster can give, and requests larger than that refused."""

from __future__ import annotations

import ray

from augsbert_ray.config import SpecError


# What a setting asks of one Ray task, actor or group of workers: the settings in words, the amount, "CPU" or "GPU".
Request = tuple[str, float, str]


def autoscaler_resources() -> dict[str, float]:
    """What an autoscaler's node groups have at their largest (a group scaled to zero nodes counts); empty without
    an autoscaler."""
    from ray._private.state import state  # private: Ray Train and Ray Data ask the autoscaler's config the same way

    return state.get_max_resources_from_cluster_config() or {}


def most_resources() -> dict[str, float]:
    """The most of each resource the Ray cluster can give: what its nodes have now, or, with an autoscaler, what its
    node groups have at their largest."""
    now, most = ray.cluster_resources(), autoscaler_resources()
    return {kind: max(now.get(kind, 0), most.get(kind, 0)) for kind in {*now, *most}}


def check_requests(requests: list[Request], resources: dict[str, float] | None = None, where: str = "the Ray cluster") -> None:
    """Refuse, naming the settings, a request larger than ``resources`` (default: ``most_resources``): Ray would
    wait for it forever, after the stages before it.

    Example:
        ::

            check_requests([("evaluation.gpus 1", 1, "GPU")])  # SpecError on a cluster without GPUs
    """
    resources = most_resources() if resources is None else resources
    for asked, amount, kind in requests:
        if amount > resources.get(kind, 0):
            raise SpecError(f"{asked}, but {where} has {resources.get(kind, 0):g} {kind}s")
