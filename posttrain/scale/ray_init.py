"""Start or join the Ray cluster that `cluster.backend: ray` runs on.

    from posttrain.scale.ray_init import connect
    connect(cfg.cluster)                 # address None: a local cluster on 127.0.0.1 only
    connect(cfg.cluster, num_cpus=2)     # ... with that many CPUs (default: this machine's count)

With `cluster.address` None, a local single-node cluster is started that listens on loopback only.
Ray 2.60 binds its GCS, raylet and workers to the machine's network address even with
`_node_ip_address="127.0.0.1"`; it uses 127.0.0.1 everywhere only when the environment variable
`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` is set before `ray` is imported (Ray reads it into a
module constant). `loopback_only()` sets it (and the constant, when Ray was imported already);
the processes Ray starts inherit it. No dashboard, a short temp dir under /tmp (Ray's socket paths
must stay under 108 bytes), a small object store, warnings only.

With an address ("host:port" of a head started by `ray start --head`, or "ray://host:port" for Ray
Client), the port is first probed (a TCP connect and an HTTP/2 preface, 3 s each at most: Ray's
GCS is a gRPC server), so an unreachable address, or a port that is not a gRPC server, is one
`ConfigError` line naming `cluster.address` instead of Ray's minutes of retries. What this does
not do: authenticate to a cluster, tell Ray's GCS from another gRPC server (that one fails in
`ray.init`, slowly), or stop a cluster it joined (`shutdown()` only disconnects from it; a local
cluster it started is stopped).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import tempfile
from typing import Any

from posttrain.core.errors import ConfigError

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
DEFAULT_OBJECT_STORE_MB = 200  # weights bigger than this spill to disk (Ray's fallback allocation)
PROBE_TIMEOUT_S = 3.0


def loopback_only() -> None:
    """Make a Ray cluster started from this process use 127.0.0.1 for every socket (see above)."""
    os.environ[LOOPBACK_ENV] = "0"
    import sys

    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # imported before the variable was set: its constant is already read
        constants.ENABLE_RAY_CLUSTER = False


def parse_address(address: str) -> tuple[str, int]:
    """("host", port) from "host:port" or "ray://host:port"; ConfigError naming cluster.address."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"cluster.address={address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379) "
                          "or ray://HOST:PORT")
    return host.strip("[]"), int(port)


_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + an empty SETTINGS frame


def _private_token() -> None:
    """A local cluster's auth token lives in a 0700 temp dir of its own (Ray opens its session dir to
    everyone), removed when the process exits — not in ~/.ray/auth_token, where Ray 2.60 would write it
    (0644) for every cluster it starts. One token per process (Ray caches the first it reads). A token
    the user configured (RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH) is kept."""
    global _our_token
    if _our_token is not None or os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    import atexit
    import shutil

    path = _our_token = os.path.join(tempfile.mkdtemp(prefix="posttrain-ray-auth-"), "auth_token")
    atexit.register(shutil.rmtree, os.path.dirname(path), True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    os.environ["RAY_AUTH_TOKEN_PATH"] = path


def _auth_from_token() -> None:
    """Joining a cluster: send Ray's auth token when one is configured (RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) and RAY_AUTH_MODE is unset. Ray 2.60 turns token
    auth on for clusters it starts (`ray start --head` included) but, joining one by address,
    sends no token unless RAY_AUTH_MODE=token."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or \
            os.path.exists(os.path.expanduser("~/.ray/auth_token")):
        os.environ["RAY_AUTH_MODE"] = "token"


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise a one-line ConfigError naming cluster.address unless a gRPC (HTTP/2) server answers
    there within `timeout_s`: Ray's GCS and Ray Client both are one. Nothing listening, a timeout,
    or a server that does not answer an HTTP/2 preface with a SETTINGS frame all fail here,
    instead of in `ray.init`, which retries for minutes."""
    host, port = parse_address(address)
    fix = "start one with `ray start --head` or leave cluster.address unset for a local cluster"
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__).lower()
        raise ConfigError(f"cluster.address={address!r}: no Ray cluster reachable at {host}:{port} ({why}); {fix}") from None
    with sock:
        try:
            sock.settimeout(timeout_s)
            sock.sendall(_H2_PREFACE)
            head = sock.recv(9)
        except OSError:
            head = b""
    if len(head) < 4 or head[3] != 4:  # an HTTP/2 server's first frame is SETTINGS (type 4)
        raise ConfigError(f"cluster.address={address!r}: {host}:{port} accepts connections but is not a Ray "
                          f"cluster (no gRPC answer within {timeout_s:g}s); {fix}")


def connect(cluster: Any = None, *, num_cpus: int | None = None, num_gpus: int | None = None,
            object_store_mb: int = DEFAULT_OBJECT_STORE_MB, temp_dir: str | None = None) -> dict:
    """Connect this process to Ray (once; a second call returns the same). `cluster` is a
    `ClusterConfig` (or anything with `.address`), or None for a local cluster. Returns
    {"address", "started": bool (this call started a local cluster), "node_ip"}."""
    address = getattr(cluster, "address", None)
    if address is not None:
        probe(address)
    if address is None or _is_loopback(parse_address(address)[0]):
        loopback_only()  # else Ray would resolve 127.0.0.1 to this machine's network address
    if address is not None:
        _auth_from_token()  # before Ray is imported: it reads RAY_AUTH_MODE then
    import ray

    if ray.is_initialized():
        return _info(started=False)
    quiet: dict = {"logging_level": logging.WARNING, "log_to_driver": True, "configure_logging": True}
    if address is not None:
        try:
            ray.init(address=address, **quiet)
        except ConnectionError as e:
            raise ConfigError(f"cluster.address={address!r}: Ray did not accept this driver "
                              f"({str(e).splitlines()[0] if str(e) else 'connection error'}); with token "
                              "authentication, give it the cluster's token (RAY_AUTH_TOKEN)") from None
        return _info(started=False)
    global _made_tmp
    tmp = temp_dir or tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's unix sockets live here
    _made_tmp = None if temp_dir else tmp
    _private_token()
    ray.init(num_cpus=num_cpus or os.cpu_count() or 1, num_gpus=num_gpus, include_dashboard=False,
             _temp_dir=tmp, object_store_memory=object_store_mb << 20, _node_ip_address="127.0.0.1",
             **quiet)
    import atexit

    atexit.register(shutdown)  # the driver's exit stops the local cluster and removes its temp dir
    return _info(started=True)


_our_token: str | None = None  # the token file `_private_token` made (one per process)
_made_tmp: str | None = None  # the temp dir `connect` made for its local cluster (removed by `shutdown`)


def _info(started: bool) -> dict:
    import ray

    ctx = ray.get_runtime_context()
    return {"address": ctx.gcs_address, "started": started,
            "node_ip": ray.util.get_node_ip_address()}


def shutdown() -> None:
    """Disconnect (a local cluster started by `connect` stops with it, and its temp dir is removed)."""
    import shutil

    import ray

    global _made_tmp
    if ray.is_initialized():
        ray.shutdown()

    if _made_tmp is not None:
        shutil.rmtree(_made_tmp, ignore_errors=True)
        _made_tmp = None
