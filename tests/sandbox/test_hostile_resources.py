"""Hostile programs that try to exhaust resources or outlive their run.

Each test asserts both that the host is unharmed (`host.check()`: no process of the
sandbox uid left, no work dir left, planted host files intact, marker never created) and
that the result is reported with the right status, return code and output.
"""

from __future__ import annotations

import os

from posttrain.sandbox import Status


def test_python_fork_bomb_is_contained_and_timed_out(run, host):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    r = run(code)
    assert r.run.status is Status.TIME_LIMIT and r.run.return_code is None
    assert r.run.wall_time < 2.5 and "time_limit" in r.events
    host.check()


def test_bash_fork_bomb_dies_with_its_parent(run, host):
    r = run(":(){ :|:& };:", language="bash")
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert r.run.wall_time < 2.5
    host.check()  # every background copy died with the sandbox


def test_thread_bomb_hits_the_process_limit(run, host):
    code = (
        "import threading, time\nn = 0\ntry:\n    while True:\n"
        "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        n += 1\n"
        "except RuntimeError as e:\n    print(n, e)\n    raise SystemExit(3)\n"
    )
    r = run(code)
    assert r.run.status is Status.FINISHED and r.run.return_code == 3
    assert "can't start new thread" in r.run.stdout and int(r.run.stdout.split()[0]) < 64
    host.check()


def test_one_shot_memory_bomb(run, host):
    r = run("x = bytearray(4 * 1024**3)\nprint('allocated')", memory_limit_mb=128)
    assert r.run.status is Status.MEMORY_LIMIT and r.run.return_code == 1
    assert "MemoryError" in r.run.stderr and r.run.stdout == ""
    assert "memory_limit" in r.events
    host.check()


def test_incremental_memory_bomb(run, host):
    r = run("chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024**2))", memory_limit_mb=128)
    assert r.run.status is Status.MEMORY_LIMIT and "MemoryError" in r.run.stderr
    host.check()


def test_c_malloc_bomb_segfaults_near_the_limit(run, host):
    code = (
        "#include <stdlib.h>\n#include <string.h>\n"
        "int main(void){ for(;;){ char *p = malloc(1 << 20); memset(p, 1, 1 << 20); } }\n"
    )
    r = run(code, language="c", memory_limit_mb=64)
    assert r.compile.status is Status.FINISHED and r.compile.return_code == 0
    assert r.run.status is Status.MEMORY_LIMIT and r.run.return_code == 128 + 11  # SIGSEGV
    host.check()


def test_cpp_new_bomb_reports_bad_alloc(run, host):
    code = (
        "#include <vector>\nint main(){ std::vector<char*> v; for(;;){ char *p = new char[1 << 20];"
        " for(int i = 0; i < (1 << 20); i += 4096) p[i] = 1; v.push_back(p); } }\n"
    )
    r = run(code, language="cpp", memory_limit_mb=64)
    assert r.run.status is Status.MEMORY_LIMIT and r.run.return_code == 128 + 6  # SIGABRT
    assert "std::bad_alloc" in r.run.stderr
    host.check()


def test_cpu_spin_is_killed_at_the_wall_clock(run, host):
    r = run("while True:\n    pass")
    assert r.run.status is Status.TIME_LIMIT and r.run.return_code is None
    assert 0.9 <= r.run.wall_time < 2.5
    assert r.run.cpu_time > 0.2  # measured from /proc just before the kill
    host.check()


def test_sleeping_without_cpu_is_killed_at_the_wall_clock(run, host):
    r = run("import time\nprint('going to sleep', flush=True)\ntime.sleep(600)")
    assert r.run.status is Status.TIME_LIMIT and r.run.stdout == "going to sleep\n"
    assert r.run.wall_time < 2.5 and r.run.cpu_time < 0.5
    host.check()


def test_ignoring_sigterm_does_not_help(run, host):
    code = "import signal, time\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)\n"
    r = run(code)
    assert r.run.status is Status.TIME_LIMIT and r.run.wall_time < 2.5
    host.check()


def test_stopping_itself_with_sigstop_is_still_killed(run, host):
    r = run("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\nprint('resumed')")
    assert r.run.status is Status.TIME_LIMIT and r.run.stdout == ""
    host.check()


def test_closing_stdout_and_stderr_then_hanging(run, host):
    r = run("import os, time\nos.close(1)\nos.close(2)\ntime.sleep(600)")
    assert r.run.status is Status.TIME_LIMIT and r.run.wall_time < 2.5
    host.check()


def test_double_fork_setsid_daemon_does_not_outlive_the_run(run, host):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        for _ in range(600):\n"
        "            open('/work/heartbeat', 'a').write('.')\n"
        "            time.sleep(0.1)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\nprint('parent done')\n"
    )
    r = run(code, run_timeout=5)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert r.run.stdout == "parent done\n" and r.run.wall_time < 2
    host.check()  # the daemon died with the sandbox's pid namespace


def test_nohup_and_setsid_background_jobs_do_not_survive(run, host):
    code = "nohup sleep 600 >/dev/null 2>&1 &\nsetsid -f sleep 600\n(sleep 600 &) &\ndisown -a\necho started\n"
    r = run(code, language="bash", run_timeout=5)
    assert r.run.status is Status.FINISHED and r.run.stdout == "started\n" and r.run.wall_time < 2
    host.check()


def test_kill_minus_one_reaches_only_the_sandbox(run, host, start_as_sandbox_uid):
    victim = start_as_sandbox_uid(["sleep", "60"])  # same uid as the sandbox, on the host
    host.allowed_pids.add(victim.pid)
    code = (
        "import os, signal\n"
        f"try:\n    os.kill({os.getpid()}, signal.SIGKILL)\nexcept ProcessLookupError:\n    print('host pid invisible')\n"
        f"try:\n    os.kill({victim.pid}, signal.SIGKILL)\nexcept ProcessLookupError:\n    print('victim invisible')\n"
        "import subprocess\nchild = subprocess.Popen(['sleep', '60'])\n"
        "os.kill(-1, signal.SIGKILL)\nprint('child', child.wait(), 'still here')\n"
    )
    r = run(code)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert r.run.stdout == "host pid invisible\nvictim invisible\nchild -9 still here\n"
    assert victim.poll() is None, "a host process of the same uid was killed"
    host.check()


def test_one_huge_file_hits_the_file_size_limit(run, host, sandbox):
    r = run("f = open('big.bin', 'wb')\nwhile True:\n    f.write(b'x' * 65536)", fetch_files=("big.bin",))
    assert r.run.status is Status.OUTPUT_LIMIT and r.run.return_code == 1
    assert "File too large" in r.run.stderr and "file_size_limit" in r.events
    assert len(r.files["big.bin"]) == sandbox.settings.fsize_bytes
    host.check()


def test_filling_the_disk_with_many_files_hits_the_work_dir_quota(run, host, sandbox):
    code = "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (4 << 20))\n    i += 1\n"
    r = run(code, run_timeout=10)
    assert r.run.status is Status.OUTPUT_LIMIT and r.run.return_code is None
    assert "disk_limit" in r.events and r.run.wall_time < 5
    host.check()


def test_inode_flood_of_empty_files_hits_the_work_dir_quota(run, host):
    r = run("import os\nos.mkdir('d')\ni = 0\nwhile True:\n    open(f'd/{i}', 'w').close()\n    i += 1\n", run_timeout=10)
    assert r.run.status is Status.OUTPUT_LIMIT and "disk_limit" in r.events
    assert r.run.wall_time < 5
    host.check()


def test_filling_tmp_stops_at_the_private_tmpfs_size(run, host):
    code = (
        "import errno\nn = 0\ntry:\n    for i in range(1000):\n"
        "        with open(f'/tmp/fill{i}', 'wb') as f:\n"
        "            for _ in range(64):\n                f.write(b'x' * (1 << 16)); n += 1 << 16\n"
        "except OSError as e:\n    print(errno.errorcode[e.errno], n >> 20)\n"
    )
    r = run(code, run_timeout=5)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    err, mib = r.run.stdout.split()
    assert err == "ENOSPC" and int(mib) <= 64
    assert not any(name.startswith("fill") for name in os.listdir("/tmp"))
    host.check()


def test_fd_exhaustion_is_bounded_and_harmless(run, host):
    before = len(os.listdir("/proc/self/fd"))
    code = "fds = []\ntry:\n    while True:\n        fds.append(open('/dev/null'))\nexcept OSError as e:\n    print(len(fds), e.strerror)\n"
    r = run(code)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    count, why = r.run.stdout.split(" ", 1)
    assert int(count) < 256 and why.strip() == "Too many open files"
    assert len(os.listdir("/proc/self/fd")) == before
    host.check()


def test_stdout_flood_is_capped_and_killed(run, host):
    r = run("import sys\nwhile True:\n    sys.stdout.write('y' * 65536)", output_limit_bytes=10_000)
    assert r.run.status is Status.OUTPUT_LIMIT and r.run.return_code is None
    assert r.run.stdout == "y" * 10_000 and "output_limit" in r.events
    host.check()


def test_output_burst_just_before_exit_is_still_over_the_limit(run, host):
    r = run("import os\nos.write(1, b'q' * 60000)\nos._exit(0)", output_limit_bytes=1000)
    assert r.run.status is Status.OUTPUT_LIMIT and r.run.stdout == "q" * 1000
    assert r.run.return_code is None and "output_limit" in r.events
    host.check()


def test_stderr_flood_is_capped_and_killed(run, host):
    r = run("#include <stdio.h>\nint main(void){ for(;;) fputs(\"zzzzzzzz\", stderr); }", language="c", output_limit_bytes=5000)
    assert r.run.status is Status.OUTPUT_LIMIT and r.run.stderr == "z" * 5000
    host.check()


def test_compiler_reading_dev_zero_is_stopped(run, host):
    r = run("#include </dev/zero>\nint main(void){return 0;}", language="c", compile_timeout=1)
    assert r.compile.status in (Status.MEMORY_LIMIT, Status.TIME_LIMIT), r.compile
    assert r.run is None and not r.ok
    host.check()
