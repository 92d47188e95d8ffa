"""One local Ray cluster per test module: loopback only (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 via
`connect`), 2 CPUs, no dashboard, a short temp dir, a 100 MB object store."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before anything imports ray


@pytest.fixture(scope="module")
def ray_cluster():
    from posttrain.scale.ray_init import connect, shutdown

    import psutil

    me = psutil.Process()
    # what this pytest process already had before Ray (servers and children other tests left), so that
    # the loopback test judges the sockets Ray opened and nothing else
    before = {"pids": {p.pid for p in me.children(recursive=True)},
              "laddrs": {tuple(c.laddr) for c in me.net_connections(kind="inet")}}
    tmp = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
    info = connect(None, num_cpus=2, object_store_mb=100, temp_dir=tmp)
    yield {**info, "before": before}
    shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
