"""connect(): a local cluster whose every socket is on loopback, and one-line errors for a Ray
address that cannot be reached or read."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from posttrain.config.cluster import ClusterConfig
from posttrain.core.errors import ConfigError

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _ray_processes(before_pids: set[int]) -> list[psutil.Process]:
    """This driver and everything it started since the cluster came up: GCS, raylet, the agents, the
    workers (children that other test modules left behind are not Ray's)."""
    me = psutil.Process(os.getpid())
    return [me, *(p for p in me.children(recursive=True) if p.pid not in before_pids)]


def test_every_ray_socket_is_on_loopback(ray_cluster):
    import ray

    @ray.remote(num_cpus=0.5)
    class Echo:
        def pid(self) -> int:
            return os.getpid()

    actor = Echo.remote()
    actor_pid = ray.get(actor.pid.remote())
    assert ray_cluster["node_ip"] == "127.0.0.1" and ray_cluster["address"].startswith("127.0.0.1:")
    before = ray_cluster["before"]
    procs = _ray_processes(before["pids"])
    pids = {p.pid for p in procs}
    assert actor_pid in pids
    names = {p.name() for p in procs}
    assert {"gcs_server", "raylet"} <= names, names
    me = os.getpid()
    conns = [c for c in psutil.net_connections(kind="inet") if c.pid in pids
             and not (c.pid == me and tuple(c.laddr) in before["laddrs"])]
    listening = [c for c in conns if c.status == psutil.CONN_LISTEN]
    assert len(listening) >= 3, listening  # GCS, raylet, object manager at least: the check is not vacuous
    assert {c.pid for c in listening} >= {p.pid for p in procs if p.name() in ("gcs_server", "raylet")}
    name = {p.pid: p.name() for p in procs}
    off = [(name.get(c.pid), c.pid, c.laddr, c.raddr) for c in conns
           if c.laddr.ip not in LOOPBACK or (c.raddr and c.raddr.ip not in LOOPBACK)]
    assert off == []
    ray.kill(actor)


def test_an_unreachable_address_is_one_line_naming_the_field_fast():
    from posttrain.scale.ray_init import connect

    started = time.monotonic()
    with pytest.raises(ConfigError) as e:
        connect(ClusterConfig(backend="ray", address="127.0.0.1:1"))
    assert time.monotonic() - started < 5
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("cluster.address='127.0.0.1:1'") and "refused" in msg


@pytest.mark.parametrize("address", ["localhost", "10.0.0.1:notaport", ":6379", "10.0.0.1:70000"])
def test_a_malformed_address_is_one_line_naming_the_field(address):
    from posttrain.scale.ray_init import connect

    with pytest.raises(ConfigError) as e:
        connect(ClusterConfig(backend="ray", address=address))
    assert "\n" not in str(e.value) and str(e.value).startswith(f"cluster.address={address!r}: expected HOST:PORT")


def test_a_port_that_is_not_ray_is_one_line_fast_and_a_real_head_passes_the_probe(ray_cluster):
    import socket
    import threading

    from posttrain.scale.ray_init import connect, probe

    probe(ray_cluster["address"])  # the running cluster's GCS answers as gRPC: no error
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    threading.Thread(target=silent.accept, daemon=True).start()  # accepts, never answers
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(ConfigError) as e:
        connect(ClusterConfig(backend="ray", address=address))
    assert time.monotonic() - started < 6
    assert "\n" not in str(e.value) and str(e.value).startswith(f"cluster.address={address!r}: ")
    assert "is not a Ray cluster" in str(e.value)
    silent.close()


def test_a_local_cluster_writes_no_secret_outside_its_own_temp_dir(tmp_path):
    """Ray 2.60 would write ~/.ray/auth_token (mode 0644) for every cluster it starts: ours keeps the
    token in the cluster's 0700 temp dir, removed with it. Run in a child with its own HOME."""
    import subprocess
    import sys
    from pathlib import Path

    home = tmp_path / "home"
    home.mkdir()
    script = (
        "import os, stat\n"
        "from posttrain.scale.ray_init import connect, shutdown\n"
        "connect(None, num_cpus=1, object_store_mb=80)\n"
        "token = os.environ['RAY_AUTH_TOKEN_PATH']\n"
        "mode = stat.S_IMODE(os.stat(os.path.dirname(token)).st_mode)\n"
        "import ray\n"
        "assert ray.get(ray.put(41)) + 1 == 42\n"
        "print(token, oct(mode), oct(stat.S_IMODE(os.stat(token).st_mode)))\n"
        "shutdown()\n"
        "connect(None, num_cpus=1, object_store_mb=80)\n"  # a second local cluster in the same process
        "assert ray.get(ray.put(1)) == 1\n"
        "shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[3]),
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    token, dir_mode, file_mode = out.stdout.split()[-3:]
    assert "posttrain-ray-auth-" in token and dir_mode == "0o700" and file_mode == "0o600"
    assert not (home / ".ray").exists(), sorted(p.name for p in home.rglob("*"))
    assert not Path(token).exists()  # removed when the process exited
