"""On an embedded Ray, a fit's torch process group listens on 127.0.0.1 only, as every other port of the run does.

Ray Train's rendezvous (ray.train.torch.config._TorchBackend.on_start, Ray 2.60) gives rank 0's node address and a
free port as MASTER_ADDR and MASTER_PORT, and torch's TCPStore server on rank 0 then binds that port on every
interface ('::'), whatever MASTER_ADDR says (torch 2.13); MASTER_ADDR alone cannot keep it local. Where every node
of the Ray is this host's loopback, rank 0 here opens the store's socket on 127.0.0.1 itself and hands it to the
TCPStore (``master_listen_fd``), and gloo's own sockets bind the loopback interface (GLOO_SOCKET_IFNAME).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

import ray
from ray.train.torch import TorchConfig
from ray.train.torch.config import _set_torch_distributed_env_vars, _TorchBackend

LOOPBACK = "127.0.0.1"
_store_socket: socket.socket | None = None  # rank 0's listening socket, held until its store has taken it


def torch_config() -> TorchConfig:
    """The process-group setup of a fit: on 127.0.0.1 where every node of the running Ray is this host's loopback
    (an embedded Ray: runtime.init_ray), else Ray Train's own.

    Example:
        ::

            TorchTrainer(train_loop, torch_config=torch_config(), scaling_config=...)
    """
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    if nodes and all(node.get("NodeManagerAddress") == LOOPBACK for node in nodes):
        return LoopbackTorchConfig()
    return TorchConfig()


class LoopbackTorchConfig(TorchConfig):
    """TorchConfig whose backend sets the process group up on 127.0.0.1."""

    @property
    def backend_cls(self) -> type:
        return _LoopbackTorchBackend


class _LoopbackTorchBackend(_TorchBackend):
    def on_start(self, worker_group: Any, backend_config: TorchConfig) -> None:
        gpus = worker_group.get_resources_per_worker().get("GPU", 0)
        backend = backend_config.backend or ("nccl" if gpus > 0 else "gloo")
        port = worker_group.execute_single(0, open_store_socket)
        worker_group.execute(_set_torch_distributed_env_vars)
        ray.get([worker_group.execute_single_async(rank, join_process_group, backend=backend, world_rank=rank,
                                                   world_size=len(worker_group), port=port, timeout_s=backend_config.timeout_s)
                 for rank in range(len(worker_group))])


def open_store_socket() -> int:
    """On rank 0: a socket listening on 127.0.0.1 at a free port, for the store; the port."""
    global _store_socket
    _store_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    _store_socket.bind((LOOPBACK, 0))
    _store_socket.listen()
    return int(_store_socket.getsockname()[1])


def loopback_interface() -> str:
    """The name of the network interface that holds 127.0.0.1 (lo on Linux, lo0 on macOS)."""
    import psutil

    return next((name for name, addresses in psutil.net_if_addrs().items()
                 if any(address.address == LOOPBACK for address in addresses)), "lo")


def join_process_group(backend: str, world_rank: int, world_size: int, port: int, timeout_s: float) -> None:
    """On each worker: torch's process group over a store on 127.0.0.1:``port``, served by rank 0."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR=LOOPBACK, MASTER_PORT=str(port))
    if backend == "gloo":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    timeout = timedelta(seconds=timeout_s)
    if world_rank == 0:
        assert _store_socket is not None, "open_store_socket runs on rank 0 first"
        # the store owns the socket from here (detach: Python will not close its descriptor under it)
        store = dist.TCPStore(LOOPBACK, port, world_size, True, timeout, master_listen_fd=_store_socket.detach())
    else:
        store = dist.TCPStore(LOOPBACK, port, world_size, False, timeout)
    dist.init_process_group(backend=backend, store=store, rank=world_rank, world_size=world_size, timeout=timeout)
