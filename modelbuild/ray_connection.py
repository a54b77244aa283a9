"""A connection to a Ray cluster through Ray Client (ray://HOST:PORT), for the build's executor and for
tuning's candidate builder; one per process, as Ray Client allows."""

from __future__ import annotations

import logging
import os
import socket

from modelbuild.errors import EnvironmentFailure, last_line

NAMESPACE = "modelbuild"
# the cluster a build's executor uses, told to the stages that run here and can fan out work of their own
# (tuning's candidate compiles); with FALLBACK_ENV set, a stage that finds it silent does that work here
CLUSTER_ENV = "MODELBUILD_CLUSTER"
FALLBACK_ENV = "MODELBUILD_CLUSTER_FALLBACK"
CONNECT_SECONDS = 5.0  # a head that does not take a TCP connection in this long is not there
# Ray Client's head forks a server for each driver, and that server dies at start a few times in a hundred
# (a gRPC poller race, ray-project/ray#63202), which the driver sees as ConnectionAbortedError ("Initialization
# failure from server"); the next try gets a fresh one
CONNECT_ATTEMPTS = 3


def connect(address: str, *, env: dict[str, str] | None = None) -> None:
    """Connect this process, its tasks' workers given `env`; EnvironmentFailure where the cluster does not
    answer, refuses, or ray is not installed."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not answers(host, int(port)):
        raise EnvironmentFailure(f"the Ray cluster at {address} does not answer")
    try:
        import ray
    except ModuleNotFoundError:
        raise EnvironmentFailure(
            f"the Ray cluster at {address} needs ray here (fix: pip install 'modelbuild[cluster]')"
        ) from None
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            ray.init(
                address,
                namespace=NAMESPACE,
                runtime_env={"env_vars": env or {}},
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
            return
        except Exception as err:  # Ray Client's: a version mismatch, a refused session
            if attempt < CONNECT_ATTEMPTS and isinstance(err, ConnectionAbortedError):
                continue
            raise EnvironmentFailure(
                f"the Ray cluster at {address} refused this driver ({type(err).__name__}: {last_line(err)})"
            ) from None


def cluster_for_this_stage() -> str | None:
    """The cluster a stage may send its own work to: the executor's, unless it may fall back and the cluster
    does not answer."""
    address = os.environ.get(CLUSTER_ENV)
    if not address:
        return None
    if os.environ.get(FALLBACK_ENV):
        host, _, port = address.removeprefix("ray://").rpartition(":")
        return address if answers(host, int(port)) else None
    return address


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_SECONDS):
            return True
    except OSError:
        return False
