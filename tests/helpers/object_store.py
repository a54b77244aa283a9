"""The S3-compatible server the tests and benches start (moto's server mode, on 127.0.0.1), and a client of it."""

from __future__ import annotations

import subprocess
import sys

import fsspec

from tests.helpers.processes import free_port, wait_for_port


def start_s3_server() -> tuple[subprocess.Popen, str]:
    """moto's S3 server in its own process on 127.0.0.1: the process, and its endpoint URL."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, server)
    return server, f"http://127.0.0.1:{port}"


def s3():
    """A fresh client: fsspec would otherwise reuse one made under another test's environment."""
    return fsspec.filesystem("s3", skip_instance_cache=True)
