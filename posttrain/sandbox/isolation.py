"""The command line that runs one untrusted program in isolation: setpriv -> bwrap -> prlimit.

How a program is started (as root):

    setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all
            --no-new-privs
      bwrap --unshare-user --disable-userns --unshare-pid/net/ipc/uts/cgroup-try
            --ro-bind /usr /usr (+ /bin /lib /lib64 /sbin as links or read-only binds)
            --ro-bind <tiny generated /etc> /etc  --proc /proc  --dev /dev (then read-only)
            --tmpfs /tmp and /dev/shm (size-limited)  --bind <fresh host dir> /work
            --remount-ro /  --clearenv  --new-session  --die-with-parent  --cap-drop ALL
            --as-pid-1
        bash -c '<INIT_SCRIPT>' ...   (pid 1 of the sandbox, see below)
          prlimit --as=<memory> --cpu=<run timeout + 1> --nproc --fsize --nofile --core=0
            <interpreter or binary, by absolute path>

Why a shell as pid 1: bwrap's own reaper exits without being waited for, so the host would
never see the CPU time of the sandboxed processes. With --as-pid-1 the shell is pid 1; it
forks the program, reaps it (and any orphan), and exits with its status (128+N for death by
signal N). bwrap waits for the shell and the host waits for bwrap, so wait4() on the host
returns the CPU time of the whole tree. As pid 1 of its namespace the shell ignores every
signal sent from inside, so the program cannot kill it. When it exits, the kernel kills
everything left in the pid namespace.

When the host process is not root, setpriv is skipped and bwrap runs as the current user.

What this protects against (each has a hostile test in tests/sandbox/):
- reading host files: only /usr, a generated /etc (passwd, group, hosts, the /etc/alternatives
  links into /usr; no shadow) and the run's own work dir are visible; the program runs as an
  unprivileged host uid, so even a mount escape would not make /root or /etc/shadow readable;
- writing host files: everything but /work, /tmp and /dev/shm is read-only; /tmp and
  /dev/shm are private size-limited tmpfs; /work is a fresh host directory per run whose
  total size and entry count are polled while it runs (see process.py; between two polls a
  fast writer can overshoot by what it writes in 0.1 s) and whose single files are capped
  by RLIMIT_FSIZE;
- the network: a private network namespace with only its own loopback (no egress, no DNS,
  no access to services on the host's 127.0.0.1);
- other processes: a private pid namespace (host processes are invisible, kill(-1) only
  reaches the sandbox), private IPC and UTS namespaces;
- leftovers: when the program's main process exits or the wall clock runs out, the pid
  namespace is torn down, so double-forked daemons die with it;
- privilege escalation: no capabilities, no_new_privs, no nested user namespaces, setuid
  binaries do not gain privileges (root is not mapped inside); the environment is cleared
  (only PATH, HOME, LANG, TMPDIR and MALLOC_ARENA_MAX are set), so no host secret in an
  environment variable reaches the program;
- resource exhaustion inside one run: address space (memory), CPU seconds, processes and
  threads, open files, file size, core dumps are limited with rlimits; the wall clock is
  enforced from the host by killing the sandbox's pid 1 (and with it the whole namespace).

What it does NOT protect against:
- kernel exploits (bwrap shares the host kernel; there is no seccomp filter) and hardware
  side channels (Spectre-class, cache timing);
- fair use of shared resources: a run can saturate its CPU core, memory bandwidth, the disk
  bandwidth of the work dir, and page cache; RLIMIT_AS bounds virtual memory per process,
  not the sum over a run's processes (bounded by nproc x memory limit), and there is no
  cgroup memory limit; the private /tmp and /dev/shm tmpfs (80 MiB by default) use host
  memory that RLIMIT_AS does not count;
- RLIMIT_NPROC counts per (user namespace, uid); on kernels before 5.14 it is shared by all
  runs of the same uid;
- information that any unprivileged process can read: kernel version, CPU model, uptime,
  load (via /proc files of the new procfs that are not per-namespace);
- with isolation="none" nothing of the above holds except rlimits and the wall-clock kill of
  the process group (a setsid daemon can outlive the run).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Sequence

from posttrain.sandbox.types import SandboxError

log = logging.getLogger(__name__)

# pid 1: run the program in a subshell that drops the variables bash adds (PWD, SHLVL, _)
# and restores the original stderr, so the shell's own messages ("Segmentation fault")
# stay out of the program's stderr; then let go of its own stdin, stdout and stderr, wait,
# and exit with the program's status. Letting go matters: pid 1 is visible to the program,
# so anything pid 1 holds open can be reopened through /proc/1/fd/N; a program that hands
# a secret to a child on stdin (the code verifier's harness) must be its only holder.
INIT_SCRIPT = (
    'exec 3>&2 2>/dev/null; (unset PWD OLDPWD SHLVL; exec "$@" 2>&3 3>&-) <&0 & '
    "exec 0</dev/null 1>/dev/null 3>&-; wait $!; exit $?"
)
WORK_DIR = "/work"  # where the run's directory appears inside the sandbox
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`) or opt out of "
    'isolation explicitly with LocalSandbox(isolation="none")'
)


@dataclass(frozen=True)
class Limits:
    """rlimits for one command (compile or run)."""

    memory_bytes: int  # RLIMIT_AS
    cpu_seconds: int  # RLIMIT_CPU soft limit (SIGXCPU); hard limit is one second more
    nproc: int = 64  # RLIMIT_NPROC: processes + threads
    fsize_bytes: int = 64 << 20  # RLIMIT_FSIZE: largest file a process may write
    nofile: int = 256  # RLIMIT_NOFILE

    def prlimit_args(self, prlimit: str) -> list[str]:
        return [
            prlimit,
            f"--as={self.memory_bytes}",
            f"--cpu={self.cpu_seconds}:{self.cpu_seconds + 1}",
            f"--nproc={self.nproc}",
            f"--fsize={self.fsize_bytes}",
            f"--nofile={self.nofile}",
            "--core=0",
            "--",
        ]


def resolve(name: str, candidates: tuple[str, ...] = ()) -> str | None:
    """Absolute real path of a program: first existing candidate, else PATH lookup."""
    for cand in candidates:
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return os.path.realpath(cand)
    found = shutil.which(name, path="/usr/local/bin:/usr/bin:/bin")
    return os.path.realpath(found) if found else None


_ETC_FILES = {
    "passwd": "root:x:0:0:root:/root:/bin/sh\nsandbox:x:{uid}:{gid}:sandbox:/work:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    "hostname": "sandbox\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}


def _mirror_alternatives(dest: str, source: str = "/etc/alternatives") -> None:
    """Debian's /etc/alternatives links (/usr/bin/awk -> /etc/alternatives/awk -> /usr/bin/mawk),
    copied as links into the generated /etc, for those that point into /usr (all the sandbox sees)."""
    if not os.path.isdir(source):
        return
    os.mkdir(dest, 0o755)
    for name in os.listdir(source):
        target = os.path.join(source, name)
        if os.path.islink(target) and os.readlink(target).startswith("/usr/"):
            os.symlink(os.readlink(target), os.path.join(dest, name))


class BwrapIsolation:
    """Builds the setpriv + bwrap + prlimit command line. Stateless apart from a tiny /etc."""

    name = "bwrap"

    def __init__(
        self,
        bwrap: str = "bwrap",
        uid: int = 65534,
        gid: int = 65534,
        tmp_size_bytes: int = 64 << 20,
        shm_size_bytes: int = 16 << 20,
    ) -> None:
        self.bwrap = shutil.which(bwrap) or ""
        if not self.bwrap:
            raise SandboxError(f"bubblewrap not found ({bwrap!r} is not an executable on PATH): {INSTALL_HINT}")
        self.prlimit = resolve("prlimit", ("/usr/bin/prlimit",))
        if self.prlimit is None:
            raise SandboxError("prlimit not found: install util-linux (`apt-get install util-linux`)")
        self.init_shell = resolve("bash", ("/usr/bin/bash", "/bin/bash"))
        if self.init_shell is None:
            raise SandboxError("bash not found; the sandbox runs it as its pid 1 (`apt-get install bash`)")
        self.as_root = os.geteuid() == 0
        self.setpriv = resolve("setpriv", ("/usr/bin/setpriv",)) if self.as_root else None
        if self.as_root and self.setpriv is None:
            raise SandboxError("setpriv not found (needed to drop root): `apt-get install util-linux`")
        self.uid, self.gid = (uid, gid) if self.as_root else (os.getuid(), os.getgid())
        self.tmp_size_bytes = tmp_size_bytes
        self.shm_size_bytes = shm_size_bytes
        help_text = self._bwrap_help()
        self.can_disable_userns = "--disable-userns" in help_text
        if not self.can_disable_userns:
            log.warning("bwrap %s has no --disable-userns: nested user namespaces stay possible", self.bwrap)
        self._etc = tempfile.mkdtemp(prefix="posttrain-sandbox-etc-")
        for fname, text in _ETC_FILES.items():
            with open(os.path.join(self._etc, fname), "w") as f:
                f.write(text.format(uid=self.uid, gid=self.gid))
        _mirror_alternatives(os.path.join(self._etc, "alternatives"))
        os.chmod(self._etc, 0o755)
        self._system = self._system_mounts()

    def _bwrap_help(self) -> str:
        try:
            out = subprocess.run([self.bwrap, "--help"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SandboxError(f"bubblewrap at {self.bwrap} does not run ({e}): {INSTALL_HINT}") from e
        return out.stdout + out.stderr

    @staticmethod
    def _system_mounts() -> list[str]:
        """/usr read-only, plus /bin /sbin /lib* as symlinks (merged /usr) or read-only binds."""
        args = ["--ro-bind", "/usr", "/usr"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = "/" + top
            if os.path.islink(host):
                args += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                args += ["--ro-bind", host, host]
        return args

    def command(
        self, argv: list[str], work_dir: str, limits: Limits, ro_binds: Sequence[tuple[str, str]] = (),
        rw_binds: Sequence[tuple[str, str]] = (),
    ) -> tuple[list[str], str]:
        """(full argv, host cwd) that runs `argv` inside the sandbox with `work_dir` as /work.
        `ro_binds`: extra (host path, sandbox path) pairs mounted read-only after /work (a path
        under /work can then be neither written, renamed nor removed); `rw_binds`: writable ones.
        A bind's host path is opened by bwrap as the sandbox uid: it must be reachable by it."""
        cmd: list[str] = []
        if self.setpriv:
            cmd += [
                self.setpriv,
                f"--reuid={self.uid}",
                f"--regid={self.gid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
            ]
        cmd += [self.bwrap, "--unshare-user", "--as-pid-1"]
        if self.can_disable_userns:
            cmd += ["--disable-userns"]
        cmd += [
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv", "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", WORK_DIR,
            "--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp",
            "--setenv", "MALLOC_ARENA_MAX", "2",
            *self._system,
            "--ro-bind", self._etc, "/etc",
            "--proc", "/proc",
            "--dev", "/dev",
            "--size", str(self.shm_size_bytes), "--tmpfs", "/dev/shm",
            "--remount-ro", "/dev",
            "--size", str(self.tmp_size_bytes), "--tmpfs", "/tmp",
            "--bind", work_dir, WORK_DIR,
            *[arg for src, dst in rw_binds for arg in ("--bind", src, dst)],
            *[arg for src, dst in ro_binds for arg in ("--ro-bind", src, dst)],
            "--chdir", WORK_DIR,
            "--remount-ro", "/",
            "--",
        ]  # fmt: skip
        init = [self.init_shell, "-c", INIT_SCRIPT, "sandbox-init"]
        return cmd + init + limits.prlimit_args(self.prlimit) + argv, "/"

    def prepare_work_dir(self, path: str) -> None:
        """Give the work dir (and everything written into it) to the sandbox uid."""
        if not self.as_root:
            return
        for root, _dirs, files in os.walk(path):
            os.chown(root, self.uid, self.gid, follow_symlinks=False)
            for name in files:
                os.chown(os.path.join(root, name), self.uid, self.gid, follow_symlinks=False)

    def check(self) -> None:
        """Start one trivial sandbox; raise SandboxError with bwrap's own words if it fails."""
        true = resolve("true", ("/usr/bin/true", "/bin/true")) or "/usr/bin/true"
        work = tempfile.mkdtemp(prefix="posttrain-sandbox-check-")
        try:
            self.prepare_work_dir(work)
            argv, cwd = self.command([true], work, Limits(memory_bytes=256 << 20, cpu_seconds=5))
            try:
                out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=30, env={})
            except (OSError, subprocess.TimeoutExpired) as e:
                raise SandboxError(f"bubblewrap at {self.bwrap} does not start ({e}): {INSTALL_HINT}") from e
            if out.returncode != 0:
                why = (out.stderr.strip().splitlines() or ["no error output"])[-1]
                raise SandboxError(f"bubblewrap at {self.bwrap} does not work here ({why}): {INSTALL_HINT}")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self._etc, ignore_errors=True)


class NoIsolation:
    """isolation="none": prlimit only, in the host's filesystem, network and process space."""

    name = "none"

    def __init__(self) -> None:
        self.prlimit = resolve("prlimit", ("/usr/bin/prlimit",))
        if self.prlimit is None:
            raise SandboxError("prlimit not found: install util-linux (`apt-get install util-linux`)")

    def command(self, argv: list[str], work_dir: str, limits: Limits) -> tuple[list[str], str]:
        return limits.prlimit_args(self.prlimit) + argv, work_dir

    def prepare_work_dir(self, path: str) -> None:
        return None

    def check(self) -> None:
        return None

    def close(self) -> None:
        return None


def sandbox_env(work_dir: str, isolated: bool) -> dict[str, str]:
    """The whole environment a program sees (bwrap clears it anyway; this is for "none")."""
    return {
        "PATH": SANDBOX_PATH,
        "HOME": WORK_DIR if isolated else work_dir,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp" if isolated else work_dir,
        # glibc reserves 64 MiB of address space per thread arena; under RLIMIT_AS that
        # would cap a 512 MiB program at about a dozen threads.
        "MALLOC_ARENA_MAX": "2",
    }
