"""Verification works wherever the venv lives: pytest reached only through a 0700 directory (a home
directory, /root, a `mktemp -d` clone) still runs in the verification sandbox.

The sandbox uid cannot traverse a 0700 directory of another user, and bwrap opens a bind's source
as that uid: binding the venv's pytest failed with "bwrap: Can't find source path ...: Permission
denied" and every terminal task failed validation. The verifier now copies pytest once per process
into a directory the sandbox uid can read (verify.verifier_tools)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import posttrain
from tests.sandbox.procs import UID

ROOT = Path(posttrain.__file__).resolve().parents[1]
TASK = ROOT / "posttrain" / "domains" / "terminal" / "data" / "fix-typeerror-script"
SITE = Path(pytest.__file__).resolve().parents[1]

VALIDATE = (
    "import sys, pytest; print('PYTEST', pytest.__file__); from posttrain.cli import app; "
    "sys.argv = ['posttrain', 'tasks', 'validate', sys.argv[1], '--json']; app()"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="a 0700 dir of another user needs root to set up")
def test_tasks_validate_with_pytest_behind_a_0700_directory():
    with tempfile.TemporaryDirectory(prefix="home-0700-") as home:  # mode 0700, owned by root
        os.chmod(home, 0o700)
        site = Path(home) / "venv-site"
        site.symlink_to(SITE, target_is_directory=True)
        # the permission problem is real: the sandbox uid cannot reach pytest through this path
        probe = subprocess.run(["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "ls",
                                str(site / "pytest")], capture_output=True, text=True)
        assert probe.returncode != 0 and "Permission denied" in probe.stderr
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
        out = subprocess.run([sys.executable, "-c", VALIDATE, str(TASK)], capture_output=True, text=True,
                             env=env, timeout=300, cwd=home)
    assert f"PYTEST {site}/pytest/__init__.py" in out.stdout, out.stdout + out.stderr
    rows = json.loads(out.stdout[out.stdout.index("["):])
    assert rows == [{"task": "fix-typeerror-script", "ok": True, "reason": rows[0]["reason"]}], out.stderr
    assert out.returncode == 0
