"""Internal: the ray section (RaySpec), the Ray cluster a run joins."""

from __future__ import annotations

from pydantic import Field, field_validator

from augsbert_ray.config.base import _Strict


def ray_address(address: str) -> str:
    """``address`` if Ray can join it; a dashboard URL (``http://HOST:8265``, what `augsbert submit` takes) is refused
    here, as ray.init refuses it only after the run directory is made, blaming $RAY_ADDRESS.

    Args:
        address: 'auto', HOST:6379 or ray://HOST:10001.

    Returns:
        ``address`` itself; a ValueError for a dashboard URL.

    Example:
        >>> ray_address("ray://10.0.0.5:10001")
        'ray://10.0.0.5:10001'
        >>> ray_address("http://10.0.0.5:8265")
        Traceback (most recent call last):
        ...
        ValueError: http://10.0.0.5:8265 is a dashboard URL, which `augsbert submit` takes; to join a cluster give auto, HOST:6379 or ray://HOST:10001
    """
    if address.lower().startswith(("http://", "https://")):
        raise ValueError(f"{address} is a dashboard URL, which `augsbert submit` takes; to join a cluster give auto, "
                         "HOST:6379 or ray://HOST:10001")
    return address


class RaySpec(_Strict):
    address: str | None = Field(None, description="None starts an embedded local Ray ($RAY_ADDRESS, if set, is the CLI's default); 'auto', HOST:6379 or ray://HOST:10001 joins a cluster.")
    num_cpus: int | None = Field(None, gt=0, description="CPUs for an embedded local Ray (default: all).")

    @field_validator("address")
    @classmethod
    def _not_a_dashboard(cls, address: str | None) -> str | None:
        return None if address is None else ray_address(address)
