"""One node of a Ray cluster on this machine, bound to 127.0.0.1, for the tests and bench/cluster.py.

    python scripts/ray_node.py --head --port 6390 --client-port 10001 --temp-dir /tmp/mbray-x
    python scripts/ray_node.py --address 127.0.0.1:6390 --cpus 1 --cores 0 --name node1

It prints `ready` once the node has joined, then waits; ending this process's group ends the node, as
killing a machine would. `ray start` cannot make such a cluster: it swaps a loopback address for the
machine's outward one, which nothing here listens on, and refuses worker nodes once told not to
(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which is what keeps the loopback address). Ray's own test clusters
(ray.cluster_utils) start nodes through the same Node class.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", action="store_true")
    parser.add_argument("--port", type=int, help="the head's GCS port")
    parser.add_argument("--client-port", type=int, help="the head's Ray Client port")
    parser.add_argument("--address", help="a worker node's head, HOST:PORT")
    parser.add_argument("--cpus", type=int, default=0)
    parser.add_argument("--cores", help="pin the node (and every worker it starts) to these cores: 0,1")
    parser.add_argument("--name", default="", help="a custom resource of 1 the node offers, to place tasks on it")
    parser.add_argument("--temp-dir", help="the head's session folder (short: it holds unix sockets)")
    args = parser.parse_args()
    if args.cores:
        os.sched_setaffinity(0, {int(core) for core in args.cores.split(",")})
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep 127.0.0.1 as the node's address
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    common = {
        "node_ip_address": "127.0.0.1",
        "num_cpus": args.cpus,
        "num_gpus": 0,
        "resources": {args.name: 1} if args.name else {},
        "object_store_memory": 200 * 2**20,
        "min_worker_port": 0,
        "max_worker_port": 0,
        "include_dashboard": False,
    }
    if args.head:
        params = RayParams(
            gcs_server_port=args.port,
            ray_client_server_port=args.client_port,
            temp_dir=args.temp_dir,
            **common,
        )
    else:
        params = RayParams(
            gcs_address=args.address,
            include_log_monitor=False,
            node_manager_port=0,
            dashboard_agent_listen_port=None,
            **common,
        )
    Node(params, head=args.head, shutdown_at_exit=True, spawn_reaper=True)
    print("ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # shutdown_at_exit then stops the node's processes
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
