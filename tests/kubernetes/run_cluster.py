"""The test cluster (cluster.py) as a process of its own, for the CLI suite's
kubernetes instances (tests/cli/test_cluster_process.h).

    run_cluster.py --work DIR    starts it with one namespace, writes DIR/cluster.json
                                 ({kubeconfig, namespace, run_id}), prints READY and runs
                                 until SIGTERM, which stops it (and removes its containers)
    run_cluster.py --left DIR    what is left on that cluster: the namespace's objects
                                 (cluster.objects) and its running containers, one a line
    run_cluster.py --problem     why a cluster cannot start here, or nothing"""

import argparse
import json
import os
import signal
import sys
import threading

from cluster import TestCluster, problem

NAMESPACE = "gpubox-cli"


def serve(work_dir):
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    cluster = TestCluster()
    try:
        cluster.start(os.path.join(work_dir, "cluster"))
        cluster.namespace(NAMESPACE)
        state = {"kubeconfig": cluster.kubeconfig, "namespace": NAMESPACE, "run_id": cluster.run_id}
        path = os.path.join(work_dir, "cluster.json")
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.rename(path + ".tmp", path)  # whoever waits for it reads it whole
        print("READY %s %s" % (cluster.kubeconfig, NAMESPACE), flush=True)
        while not stopping.wait(0.5):
            pass
    finally:
        cluster.stop()
    return 0


def left(work_dir):
    from kubernetes import config
    with open(os.path.join(work_dir, "cluster.json")) as f:
        state = json.load(f)
    cluster = TestCluster()
    cluster.run_id = state["run_id"]
    cluster.api = config.new_client_from_config(config_file=state["kubeconfig"])
    found = cluster.objects(state["namespace"])
    found += ["container " + name for name, status in sorted(cluster.containers().items()) if status == "running"]
    cluster.api.close()
    print("\n".join(found))
    return 0


def main():
    parser = argparse.ArgumentParser()
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--work", metavar="DIR")
    what.add_argument("--left", metavar="DIR")
    what.add_argument("--problem", action="store_true")
    args = parser.parse_args()
    if args.problem:
        print(problem())
        return 0
    return serve(args.work) if args.work else left(args.left)


if __name__ == "__main__":
    sys.exit(main())
