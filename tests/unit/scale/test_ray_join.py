"""connect() with cluster.address: join a head started by `ray start --head` (Ray 2.60 turns token
auth on for it), run a rollout worker there; the head's processes are ended by pid afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from posttrain.config.cluster import ClusterConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def head():
    tmp = tempfile.mkdtemp(prefix="rj-", dir="/tmp")
    port = _free_port()
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    ray_cli = str(Path(sys.executable).with_name("ray"))
    subprocess.run([ray_cli, "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
                    f"--temp-dir={tmp}", "--disable-usage-stats", "--object-store-memory=100000000"],
                   env=env, check=True, capture_output=True, timeout=120)
    yield f"127.0.0.1:{port}"
    from posttrain.scale.ray_init import shutdown

    shutdown()
    mine = [p for p in psutil.process_iter(["cmdline"]) if tmp in " ".join(p.info["cmdline"] or [])]
    for p in mine:  # only this head's processes (their command lines name its temp dir)
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(mine, timeout=10)
    shutil.rmtree(tmp, ignore_errors=True)


def test_joining_a_running_head_by_address(head, tiny_model_dir, tiny_tokenizer):
    from posttrain.scale.ray_init import connect
    from posttrain.engine.protocol import SamplingParams

    info = connect(ClusterConfig(backend="ray", address=head))
    assert info["started"] is False and info["address"] == head and info["node_ip"] == "127.0.0.1"
    from posttrain.scale.engine import RayEngine

    engine = RayEngine("paged", tiny_model_dir, tiny_tokenizer, {"device": "cpu"}, workers=1, num_cpus=0.5)
    try:
        [c] = engine.generate([[5, 6, 7]], [SamplingParams(max_tokens=6, seed=1)])
        assert len(c.token_ids) == 6 and engine.worker_info()[0]["node_ip"] == "127.0.0.1"
    finally:
        engine.close()
