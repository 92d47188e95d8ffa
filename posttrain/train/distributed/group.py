"""torch.distributed process groups on one host, and a launcher of local rank processes.

    port = free_port()
    init_group(rank, world_size, port)          # env:// rendezvous on 127.0.0.1; gloo on CPU, nccl on CUDA
    ...
    teardown()

    results = launch(fn, world_size, *args)     # fn(rank, world_size, *args) in world_size processes
    ranks = spawn_ranks(fn, [1, 2, 3], 4, port, *args)   # some ranks only (rank 0 is the caller)

A rank that raises or dies makes `launch` (or `RankProcesses.check`) raise one
`TrainingError` line naming the rank, its exit code and its last error line; the other
ranks are then terminated (they would wait forever in their next collective).

What it does not do: several hosts (the rendezvous is a file in the temp dir, MASTER_ADDR 127.0.0.1,
gloo bound to `lo`: nothing listens beyond loopback), elastic restarts.
"""

from __future__ import annotations

import datetime
import os
import queue as queue_mod
import socket
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from posttrain.core.errors import TrainingError, one_line

DEFAULT_TIMEOUT_S = 300.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for MASTER_PORT): it names the job's rendezvous, whose
    store is a file (`store_path`), never a socket; a stale store of that name is removed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store_path(port).unlink(missing_ok=True)
    return port


def store_path(port: int) -> Path:
    """The job's rendezvous store: a file beside this machine's temp files (one host), so nothing
    listens on a network interface (torch's TCPStore binds every interface)."""
    return Path(tempfile.gettempdir()) / f"posttrain-dist-{port}.store"


def backend_for(device: torch.device | str | None = None) -> str:
    """nccl for CUDA devices, gloo otherwise."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def init_group(rank: int | None = None, world_size: int | None = None, port: int | None = None, *,
               backend: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Join the default process group; missing arguments come from RANK, WORLD_SIZE, MASTER_PORT.
    On CUDA the rank's device is cuda:LOCAL_RANK (= rank on one host)."""
    try:
        rank = int(os.environ["RANK"]) if rank is None else rank
        world_size = int(os.environ["WORLD_SIZE"]) if world_size is None else world_size
        port = int(os.environ["MASTER_PORT"]) if port is None else port
    except KeyError as e:
        raise TrainingError(f"torch.distributed: environment variable {e.args[0]} is not set") from None
    except ValueError as e:
        raise TrainingError(f"torch.distributed: RANK / WORLD_SIZE / MASTER_PORT must be integers ({e})") from None
    if not 0 <= rank < world_size:
        raise TrainingError(f"torch.distributed: rank {rank} is outside world size {world_size}")
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=os.environ.get("LOCAL_RANK", str(rank)),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    backend = backend or backend_for()
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's pair sockets on loopback only
    dist.init_process_group(backend, init_method=f"file://{store_path(port)}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))


def teardown() -> None:
    """Leave the default process group (no-op when there is none)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_device() -> torch.device:
    """This rank's device: cuda:LOCAL_RANK under nccl, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return torch.device("cpu")




def _entry(rank: int, world_size: int, port: int, fn: Callable, args: tuple, results, timeout_s: float) -> None:
    """A spawned rank: join the group, run fn, report its result or its error as one line."""
    try:
        init_group(rank, world_size, port, timeout_s=timeout_s)
        out = fn(rank, world_size, *args)
        results.put((rank, None, out))
    except BaseException as e:  # noqa: BLE001 -- reported to the parent as one line, then exit 1
        last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = f" (at {os.path.basename(last.filename)}:{last.lineno})" if last else ""
        results.put((rank, one_line(e, None) + where, None))
        results.close()
        results.join_thread()
        os._exit(1)  # no teardown: a peer may be stuck in a collective with us
    teardown()


class RankProcesses:
    """Spawned rank processes: results, failures as one line, termination."""

    def __init__(self, procs: dict[int, mp.Process], results):
        self.procs, self.results = procs, results
        self.errors: dict[int, str] = {}
        self.outputs: dict[int, object] = {}

    def _drain(self) -> None:
        while True:
            try:
                rank, err, out = self.results.get_nowait()
            except queue_mod.Empty:
                return
            if err is not None:
                self.errors[rank] = err
            else:
                self.outputs[rank] = out

    def failure(self) -> str | None:
        """One line about the first rank that failed (the first error reported: a peer's later
        "connection closed" is its consequence), or about a rank that died without a word; None if none."""
        self._drain()
        dead = [r for r, p in sorted(self.procs.items()) if p.exitcode not in (None, 0)]
        if dead and not self.errors:
            time.sleep(0.2)  # its error line may still be in the pipe
            self._drain()
        if self.errors:
            rank = next(iter(self.errors))  # arrival order
        elif dead:
            rank = dead[0]
        else:
            return None
        p = self.procs[rank]
        p.join(timeout=5)
        code = p.exitcode
        how = f"exit code {code}" if code is None or code >= 0 else f"killed by signal {-code}"
        return f"trainer rank {rank} failed ({how}): {self.errors.get(rank, 'no error message')}"

    def check(self) -> None:
        """Raise TrainingError (and terminate the other ranks) if a rank has failed."""
        line = self.failure()
        if line is not None:
            self.terminate()
            raise TrainingError(line)

    def alive(self) -> bool:
        return any(p.is_alive() for p in self.procs.values())

    def terminate(self) -> None:
        for p in self.procs.values():
            if p.is_alive():
                p.terminate()
        for p in self.procs.values():
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()

    def wait(self, timeout_s: float | None = None) -> dict[int, object]:
        """Wait for every rank to finish; their return values by rank. Raises on the first failure."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.alive():
            self.check()
            if deadline is not None and time.monotonic() > deadline:
                self.terminate()
                raise TrainingError(f"trainer ranks {sorted(r for r, p in self.procs.items() if p.exitcode is None)} "
                                    f"did not finish within {timeout_s:g} s")
            time.sleep(0.05)
        self.check()
        self._drain()
        for p in self.procs.values():
            p.join()
        return self.outputs


def spawn_ranks(fn: Callable, ranks: list[int], world_size: int, port: int, *args,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> RankProcesses:
    """Start fn(rank, world_size, *args) in one spawned process per rank of `ranks` (each joins the group)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = {}
    for r in ranks:
        p = ctx.Process(target=_entry, args=(r, world_size, port, fn, args, results, timeout_s), daemon=True,
                        name=f"posttrain-rank-{r}")
        p.start()
        procs[r] = p
    return RankProcesses(procs, results)


def launch(fn: Callable, world_size: int, *args, timeout_s: float = DEFAULT_TIMEOUT_S) -> list:
    """Run fn(rank, world_size, *args) on `world_size` local ranks (each in its own process and in the
    process group); returns their return values in rank order (fn and args must be picklable)."""
    if world_size < 1:
        raise TrainingError(f"world_size must be >= 1, got {world_size}")
    ranks = spawn_ranks(fn, list(range(world_size)), world_size, free_port(), *args, timeout_s=timeout_s)
    try:
        out = ranks.wait(timeout_s=timeout_s)
    finally:
        ranks.terminate()
    return [out.get(r) for r in range(world_size)]
