"""Hostile programs that try to get out: host files, secrets, network, processes,
privileges, namespaces, and files fetched back through planted links.

Each test asserts both that the host is unharmed (`host.check()`) and that the result is
reported correctly.
"""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from posttrain.sandbox import RunRequest, Status


def _lines(r) -> dict[str, str]:
    return dict(line.split("=", 1) for line in r.run.stdout.splitlines() if "=" in line)


def test_writes_outside_the_work_dir_fail_or_stay_inside(run, host):
    targets = ["/etc/evil", "/usr/evil", "/evil", "/root/evil", "/work/../evil", "/proc/sys/kernel/hostname", host.marker]
    code = "import json\nout = {}\n"
    code += f"for p in {targets!r}:\n"
    code += "    try:\n        open(p, 'w').write('pwned')\n        out[p] = 'ok'\n    except OSError as e:\n        out[p] = type(e).__name__\n"
    code += "print(json.dumps(out))\n"
    r = run(code)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    out = json.loads(r.run.stdout)
    assert all(out[p] != "ok" for p in targets[:-1]), out
    assert out[host.marker] == "ok"  # inside the sandbox /tmp is a private tmpfs ...
    for p in ("/etc/evil", "/usr/evil", "/evil", "/root/evil"):
        assert not os.path.exists(p)
    assert socket.gethostname() != "pwned"
    host.check()  # ... so the host's marker path still does not exist


def test_tampering_with_system_paths_fails(run, host):
    code = (
        "echo hacked >> /usr/bin/prlimit; echo prlimit=$?\n"
        "rm -f /usr/bin/python3; echo rm=$?\n"
        "echo 'x::0:0::/:/bin/sh' >> /etc/passwd; echo passwd=$?\n"
        "mount -t tmpfs none /usr 2>/dev/null; echo mount=$?\n"
        "ln /etc/passwd /work/hard 2>/dev/null; echo hardlink=$?\n"
    )
    r = run(code, language="bash")
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert all(v != "0" for v in _lines(r).values()), r.run.stdout
    assert os.path.exists("/usr/bin/python3") and os.access("/usr/bin/prlimit", os.X_OK)
    host.check()


def test_host_secrets_are_invisible(run, host):
    paths = ["/etc/shadow", host.secret_tmp, host.secret_root or "/root/x", "/root", "/home", "/proc/1/root/etc/shadow"]
    code = "import os\n"
    code += f"for p in {paths!r}:\n"
    code += "    try:\n        print(p, '=', os.listdir(p) if os.path.isdir(p) else open(p).read())\n"
    code += "    except OSError as e:\n        print(p, '=', type(e).__name__)\n"
    r = run(code)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert host.secret not in r.run.stdout and "root:" not in r.run.stdout
    for line in r.run.stdout.splitlines():
        assert line.rsplit("= ", 1)[1] in ("FileNotFoundError", "PermissionError"), line
    host.check()


def test_environment_of_the_host_is_not_visible(run, host, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_TEST_SECRET_TOKEN", host.secret)
    code = "import os\nprint(sorted(os.environ))\nprint(open('/proc/1/environ').read())\nprint(open('/proc/self/environ').read())"
    r = run(code)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert host.secret not in r.run.stdout
    assert r.run.stdout.splitlines()[0] == str(sorted(["HOME", "LANG", "MALLOC_ARENA_MAX", "PATH", "TMPDIR"]))
    host.check()


def test_host_processes_are_invisible(run, host):
    code = (
        "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "cmds = [open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode() for p in pids]\n"
        "print(len(pids))\nprint(cmds)\n"
    )
    r = run(code)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    count, cmds = r.run.stdout.splitlines()
    assert int(count) <= 3  # pid 1 (the init shell) and the program itself
    assert "pytest" not in cmds and str(os.getpid()) not in cmds
    host.check()


def test_network_egress_by_ip_fails(run, host):
    code = (
        "import socket\n"
        "for addr in [('1.1.1.1', 80), ('8.8.8.8', 53), ('10.0.0.1', 22)]:\n"
        "    s = socket.socket(); s.settimeout(0.5)\n"
        "    try:\n        s.connect(addr); print(addr[0], '=connected')\n"
        "    except OSError as e:\n        print(addr[0], '=' + type(e).__name__, e.errno)\n"
        "print(open('/proc/net/dev').read().count(':') - 0, 'interfaces')\n"
    )
    r = run(code, run_timeout=3)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert "connected" not in r.run.stdout and r.run.stdout.count("OSError 101") == 3  # ENETUNREACH
    host.check()


def test_dns_resolution_fails(run, host):
    code = (
        "import socket\ntry:\n    print(socket.getaddrinfo('example.com', 80))\n"
        "except socket.gaierror as e:\n    print('gaierror', e.errno)\n"
        "print(open('/etc/resolv.conf').read() if __import__('os').path.exists('/etc/resolv.conf') else 'no resolv.conf')\n"
    )
    r = run(code, run_timeout=3)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert r.run.stdout.startswith("gaierror") and "no resolv.conf" in r.run.stdout
    host.check()


@pytest.fixture
def tcp_server():
    """A real TCP server on all host interfaces; records every connection it accepts."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))
    server.listen(16)
    server.settimeout(0.1)
    accepted: list[tuple] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except OSError:
                continue
            accepted.append(addr)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


def test_host_loopback_service_is_unreachable(run, host, tcp_server):
    port, accepted = tcp_server
    probe = socket.create_connection(("127.0.0.1", port), timeout=1)  # the server does work
    probe.close()
    deadline = __import__("time").monotonic() + 2
    while not accepted and __import__("time").monotonic() < deadline:
        __import__("time").sleep(0.01)
    assert len(accepted) == 1
    addrs = ["127.0.0.1", "localhost"]
    try:
        addrs += socket.gethostbyname_ex(socket.gethostname())[2]
    except OSError:
        pass
    code = "import socket\n"
    code += f"for a in {addrs!r}:\n"
    code += "    try:\n"
    code += f"        socket.create_connection((a, {port}), timeout=0.5); print(a, '=connected')\n"
    code += "    except OSError as e:\n        print(a, '=' + type(e).__name__)\n"
    r = run(code, run_timeout=5)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert "connected" not in r.run.stdout, r.run.stdout
    assert "127.0.0.1 =ConnectionRefusedError" in r.run.stdout  # its own, empty loopback
    assert len(accepted) == 1, "the host's server received a connection from the sandbox"
    host.check()


def test_nested_namespaces_are_refused(run, host):
    code = (
        "unshare -U true 2>/dev/null; echo unshare_user=$?\n"
        "unshare -r id 2>/dev/null; echo unshare_root=$?\n"
        "unshare -n true 2>/dev/null; echo unshare_net=$?\n"
        "bwrap --bind / / true 2>/dev/null; echo bwrap=$?\n"
    )
    r = run(code, language="bash")
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert _lines(r) and all(v != "0" for v in _lines(r).values()), r.run.stdout
    host.check()


def test_privilege_escalation_fails(run, host):
    code = (
        "echo uid=$(id -u)\n"
        "su -c id root </dev/null >/dev/null 2>&1; echo su=$?\n"
        "sudo -n id >/dev/null 2>&1; echo sudo=$?\n"
        "cp /usr/bin/id ./myid && chmod u+s ./myid && echo suid_uid=$(./myid -u)\n"
        "python3 -c 'import os; os.setuid(0)' 2>/dev/null; echo setuid=$?\n"
        "echo caps=$(grep CapEff /proc/self/status | cut -f2)\n"
        "echo nnp=$(grep NoNewPrivs /proc/self/status | cut -f2)\n"
    )
    r = run(code, language="bash", run_timeout=5)  # su sleeps a second after failing
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    v = _lines(r)
    assert v["uid"] != "0" and v["suid_uid"] == v["uid"]
    assert v["su"] != "0" and v["sudo"] != "0" and v["setuid"] != "0"
    assert v["caps"] == "0000000000000000" and v["nnp"] == "1"
    host.check()


def test_planted_symlinks_and_fifos_are_not_fetched(sandbox, host):
    code = (
        "import os\n"
        "os.symlink('/etc/passwd', 'passwd')\n"
        f"os.symlink({host.secret_tmp!r}, 'secret')\n"
        "os.symlink('/', 'root')\n"
        "os.makedirs('d')\nos.symlink('/etc', 'd/etc')\n"
        "os.mkfifo('fifo')\n"
        "open('real.txt', 'w').write('mine')\n"
    )
    fetch = ("passwd", "secret", f"root{host.secret_tmp}", "d/etc/passwd", "fifo", "real.txt", "absent")
    r = sandbox.run(RunRequest(code=code, fetch_files=fetch, run_timeout=2))
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert r.files == {"real.txt": b"mine"}
    refused = sorted(e.split(":")[1] for e in r.events if e.startswith("fetch_refused"))
    assert refused == sorted(["passwd", "secret", f"root{host.secret_tmp}", "d/etc/passwd", "fifo"])
    host.check()


@pytest.mark.parametrize(
    "fields",
    [
        {"fetch_files": ("../../etc/shadow",)},
        {"fetch_files": ("/etc/shadow",)},
        {"files": {"/tmp/planted": b"x"}},
        {"files": {"../planted": b"x"}},
    ],
)
def test_escaping_paths_are_rejected_before_running(sandbox, host, fields):
    runs = sandbox.metrics()["runs"]
    with pytest.raises(ValueError, match="absolute|'\\.\\.'"):
        sandbox.run(RunRequest(code="print('ran')", **fields))
    assert sandbox.metrics()["runs"] == runs
    assert not os.path.exists("/tmp/planted")
    host.check()


def test_compiling_cannot_include_host_secrets(run, host):
    code = f'#include "{host.secret_tmp}"\n#include "/etc/shadow"\nint main(void){{return 0;}}\n'
    r = run(code, language="c")
    assert r.compile.status is Status.FINISHED and r.compile.return_code != 0
    assert "No such file or directory" in r.compile.stderr and host.secret not in r.compile.stderr
    assert r.run is None
    host.check()


def test_sandboxed_python_sees_no_host_venv(run, host):
    code = "import sys\nprint(sys.executable)\nprint(sys.path)\ntry:\n    import torch\nexcept ImportError:\n    print('no torch')\n"
    r = run(code)
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    exe, path, torch = r.run.stdout.splitlines()
    assert exe.startswith("/usr/") and torch == "no torch"
    assert ".venv" not in path and ".pyenv" not in path and "/root" not in path
    host.check()


def test_init_process_holds_none_of_the_programs_streams(sandbox, host):
    # pid 1 is visible to the program: whatever it keeps open can be reopened through
    # /proc/1/fd/N. A harness that reads a secret from stdin must be its only holder.
    code = (
        "import os\nprint('fds=' + ','.join(sorted(os.readlink('/proc/1/fd/' + f) for f in os.listdir('/proc/1/fd'))))\n"
        "print('stdin=' + repr(open('/proc/1/fd/0', 'rb').read()))\n"
        "print('own=' + repr(os.read(0, 100)))\n"
    )
    r = sandbox.run(RunRequest(code=code, stdin="SECRET-KEY"))
    got = _lines(r)
    assert r.run.return_code == 0, r.run.stderr
    assert set(got["fds"].split(",")) == {"/dev/null"}
    assert "SECRET" not in got["stdin"]
    assert got["own"] == repr(b"SECRET-KEY")  # the program itself still gets its stdin
    host.check()
