"""Process-level setup shared by the driver, Ray actors and Ray Train workers.

Import from here: the submodules (the Ray auth token file, the console and logging, Ray start-up, the cluster's
resources, torch's threads and bf16 checks) are internal.
"""

from __future__ import annotations

import ray  # noqa: F401 (as runtime.ray, the module init_ray starts, which callers and tests patch through it)

from augsbert_ray.runtime.auth import InsecureTokenError, check_token_file, read_token
from augsbert_ray.runtime.console import CONSOLE_LINE, RUN_LOG, chatter_to, format_seconds, log, setup_logging, setup_worker_logging
from augsbert_ray.runtime.ray_cluster import check_gcs, cluster_address, connect_timeout, init_ray, ray_output_kept_off_console, wait_for_ray_data
from augsbert_ray.runtime.resources import Request, autoscaler_resources, check_requests, most_resources
from augsbert_ray.runtime.torch_setup import check_cpu_bf16, configure_torch_threads, cpu_has_bf16, gpu_unseen, warn_cpu_bf16

__all__ = [
    "CONSOLE_LINE", "RUN_LOG", "InsecureTokenError", "Request", "autoscaler_resources", "chatter_to",
    "check_cpu_bf16", "check_gcs", "check_requests", "check_token_file", "cluster_address",
    "configure_torch_threads", "connect_timeout", "cpu_has_bf16", "format_seconds", "gpu_unseen", "init_ray", "log",
    "most_resources", "ray_output_kept_off_console", "read_token", "setup_logging", "setup_worker_logging", "wait_for_ray_data", "warn_cpu_bf16",
]
