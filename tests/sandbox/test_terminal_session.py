"""The persistent shell in bubblewrap: state between commands, exit codes, cut output, timeouts and
restarts, nothing left after close, many sessions in one event loop, InfraError when bwrap fails."""

from __future__ import annotations

import asyncio
import os
import secrets
import time

import pytest

from posttrain.envs.env import InfraError
from posttrain.domains.terminal.session import ShellSession, SessionLimits, make_work_root, new_work_dir, shared_isolation
from posttrain.sandbox.workdir import remove_work_dir
from tests.sandbox.procs import UID, aio, cmdlines_with, processes_of



@pytest.fixture(scope="module")
def iso():
    return shared_isolation(UID, UID)


@pytest.fixture
def work(iso):
    root = make_work_root()
    path = new_work_dir(root, {"hello.txt": (b"hi there\n", 0o644), "bin/run.sh": (b"#!/bin/bash\necho ran\n", 0o755)}, iso)
    yield path
    remove_work_dir(root)


def session(work, iso, **kw) -> ShellSession:
    return ShellSession(work, isolation=iso, **kw)


@aio
async def test_env_vars_cwd_and_exit_codes_persist_between_commands(work, iso):
    s = session(work, iso)
    await s.start()
    try:
        out = await s.run("cat hello.txt; pwd; ./bin/run.sh", 5)
        assert (out.output, out.exit_code, out.timed_out, out.truncated) == ("hi there\n/work\nran\n", 0, False, False)
        assert (await s.run("export GREETING=hey; mkdir -p sub && cd sub; f() { echo fn$1; }", 5)).exit_code == 0
        out = await s.run("echo $GREETING; pwd; f 7", 5)
        assert out.output == "hey\n/work/sub\nfn7\n"
        assert (await s.run("exit_with() { return $1; }; exit_with 42", 5)).exit_code == 42
        out = await s.run("echo to-stderr >&2; ls /nonexistent", 5)
        assert "to-stderr" in out.output and "No such file" in out.output and out.exit_code == 2
        out = await s.run("echo 'unclosed", 5)  # a syntax error is the command's, the shell goes on
        assert out.exit_code == 2 and not out.restarted
        assert (await s.run("echo still; cat", 5)).output == "still\n"  # stdin is /dev/null, never our pipe
        assert (await s.run("id -u; cat /etc/hostname; ls /", 5)).output.split("\n")[1] == "sandbox"
        out = await s.run("printf 'no newline at the end'", 5)
        assert out.output == "no newline at the end"
    finally:
        await s.close()


@aio
async def test_a_printed_fake_end_marker_does_not_end_the_command(work, iso):
    s = session(work, iso)
    await s.start()
    try:
        out = await s.run("echo; echo 00000000000000000000000000000000 0; sleep 0.3; echo real-end; exit_code() { return 3; }; exit_code", 5)
        assert out.output.endswith("real-end\n") and out.exit_code == 3
    finally:
        await s.close()


@aio
async def test_long_output_is_cut_in_the_middle_with_a_marker(work, iso):
    s = session(work, iso, max_output_bytes=1000)
    await s.start()
    try:
        out = await s.run("seq 1 100000", 10)
        total = len("".join(f"{i}\n" for i in range(1, 100001)))
        assert out.truncated and out.exit_code == 0
        assert out.output.startswith("1\n2\n3\n") and out.output.endswith("99999\n100000\n")
        assert f"[... {total - 1000} bytes cut ...]" in out.output
        assert len(out.output) < 1100
        out = await s.run("echo short", 5)  # the next command starts clean
        assert (out.output, out.truncated) == ("short\n", False)
    finally:
        await s.close()


@aio
async def test_a_timeout_kills_the_tree_and_restarts_over_the_same_files(work, iso):
    s = session(work, iso)
    await s.start()
    try:
        await s.run("export KEEP=1; cd /tmp; echo data > /work/made.txt", 5)
        start = time.monotonic()
        out = await s.run("echo partial; sleep 30", 1.0)
        assert time.monotonic() - start < 5
        assert out.timed_out and out.restarted and out.reason == "timeout" and out.exit_code is None
        assert out.output == "partial\n"
        out = await s.run("echo ${KEEP:-unset}; pwd; cat made.txt", 5)
        assert out.output == "unset\n/work\ndata\n" and s.restarts == 1
    finally:
        await s.close()


@pytest.mark.parametrize("command, code", [("exit 3", 3), ("kill -9 $$", 137), ("exec true", 0)])
@aio
async def test_a_command_that_ends_the_shell_gets_a_fresh_one(work, iso, command, code):
    s = session(work, iso)
    await s.start()
    try:
        await s.run("export X=1", 5)
        out = await s.run(command, 5)
        assert out.restarted and out.reason == "shell_exited" and out.exit_code == code and not out.timed_out
        assert (await s.run("echo ${X:-fresh}; cat hello.txt", 5)).output == "fresh\nhi there\n"
    finally:
        await s.close()


@aio
async def test_nothing_of_the_session_survives_close(work, iso):
    marker = f"{secrets.randbelow(10**6) + 10**6}.5"
    s = session(work, iso)
    await s.start()
    await s.run(f"nohup sleep {marker} >/dev/null 2>&1 & setsid bash -c 'sleep {marker}' >/dev/null 2>&1 &", 5)
    await s.run("(while true; do sleep 1; done) &", 5)
    time.sleep(0.2)
    assert len(cmdlines_with(f"sleep {marker}")) >= 2  # the daemons run while the session lives
    await s.close()
    assert cmdlines_with(f"sleep {marker}") == []
    if UID != os.getuid():
        assert processes_of(UID) == []


@aio
async def test_the_process_limit_holds_and_the_session_recovers(work, iso):
    s = session(work, iso, limits=SessionLimits(nproc=48))
    await s.start()
    try:
        forks = ("python3 -c 'import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
                 "            time.sleep(3); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print(\"limit\", n, e.errno)'")
        out = await s.run(forks, 10)
        word, n, errno = out.output.split()
        assert word == "limit" and 10 < int(n) < 48 and errno == "11"  # EAGAIN at the process limit
        out = await s.run(":(){ :|:& };:", 2.0)  # fork bomb: bounded, then killed with the session
        out = await s.run("sleep 3", 1.0)  # the bomb's copies hold every process slot, or have died
        out = await s.run("echo alive; ls hello.txt", 5)
        assert "alive" in out.output
    finally:
        await s.close()
    if UID != os.getuid():
        assert processes_of(UID) == []


@aio
async def test_many_sessions_run_at_once_in_one_loop(iso):
    root = make_work_root()
    try:
        sessions = [session(new_work_dir(root, {"n.txt": (f"{i}\n".encode(), 0o644)}, iso), iso) for i in range(12)]
        await asyncio.gather(*(s.start() for s in sessions))
        start = time.monotonic()
        outs = await asyncio.gather(*(s.run("sleep 1; cat n.txt", 10) for s in sessions))
        assert time.monotonic() - start < 6  # 12 one-second commands overlap (serially: 12 s)
        assert [o.output for o in outs] == [f"{i}\n" for i in range(12)]
        await asyncio.gather(*(s.close() for s in sessions))
    finally:
        remove_work_dir(root)


@aio
async def test_the_disk_quota_restarts_the_shell(work, iso):
    s = session(work, iso, limits=SessionLimits(disk_bytes=8 << 20))
    await s.start()
    try:
        out = await s.run("for i in 1 2 3 4; do head -c 4M /dev/zero > big$i; done; sleep 10", 8)
        assert out.restarted and out.reason == "disk_limit"
    finally:
        await s.close()


@aio
async def test_a_sandbox_that_does_not_start_is_an_infra_error(work, iso):
    class Broken:
        def command(self, argv, work_dir, limits, ro_binds=()):
            cmd, cwd = iso.command(argv, work_dir, limits, ro_binds)
            return [a if a != "--unshare-pid" else "--no-such-bwrap-option" for a in cmd], cwd

    s = ShellSession(work, isolation=Broken())
    with pytest.raises(InfraError, match="the shell did not start"):
        await s.start()
    await s.close()
