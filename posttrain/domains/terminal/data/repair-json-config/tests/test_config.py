"""The config is repaired (strict JSON, every original setting kept) and app.py is unchanged and runs."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
PY = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
APP_SHA256 = "54ac717126e72e65e9b35e789409fd31a6abd71eebabde9031ca9a9cf3030625"
SETTINGS = {
    "name": "shop",
    "host": "0.0.0.0",
    "port": 8080,
    "workers": 4,
    "plugins": ["auth", "cache", "metrics"],
    "limits": {"max_body_kb": 512, "timeout_s": 30},
}


def test_app_unchanged():
    assert hashlib.sha256((WORK / "app.py").read_bytes()).hexdigest() == APP_SHA256


def test_config_is_strict_json_with_the_original_settings():
    config = json.loads((WORK / "config.json").read_text())
    assert config == SETTINGS
    assert type(config["port"]) is int


def test_app_starts():
    run = subprocess.run([PY, "app.py"], cwd=WORK, capture_output=True, text=True, timeout=10)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (
        "serving shop on 0.0.0.0:8080 with 4 workers\n"
        "plugins: auth, cache, metrics\n"
        "limit max_body_kb = 512\n"
        "limit timeout_s = 30\n"
    )
