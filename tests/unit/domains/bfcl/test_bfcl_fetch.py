"""`posttrain tasks fetch bfcl`: the pinned wheel's data into the cache, checked, atomic, offline after."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from posttrain.core.errors import DataError
from posttrain.domains.bfcl import fetch


def _wheel(path, files):
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def _pin(monkeypatch, wheel):
    monkeypatch.setattr(fetch, "SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())


def test_fetch_unpacks_only_the_data_and_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path / "cache"))
    wheel = _wheel(tmp_path / "w.whl", {
        "bfcl_eval/data/BFCL_v4_simple_python.json": '{"id": "simple_python_0"}\n',
        "bfcl_eval/eval_checker/multi_turn_eval/func_source_code/math_api.py": "class MathAPI: pass\n",
        "bfcl_eval/model_handler/api.py": "import openai\n",  # code we never read
    })
    _pin(monkeypatch, wheel)
    assert fetch.fetched_dir() is None
    got = fetch.fetch(wheel=wheel)
    assert got == fetch.fetched_dir()
    assert (got / "data" / "BFCL_v4_simple_python.json").read_text().startswith('{"id"')
    assert (got / "eval_checker/multi_turn_eval/func_source_code/math_api.py").is_file()
    assert not (got / "model_handler").exists()
    # a second call is offline: no wheel is needed, nothing is downloaded
    monkeypatch.setattr(fetch, "_download", lambda dest: pytest.fail("downloaded again"))
    assert fetch.fetch() == got


def test_a_wheel_with_another_checksum_is_refused_and_the_cache_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path / "cache"))
    good = _wheel(tmp_path / "good.whl", {"bfcl_eval/data/a.json": "{}\n"})
    _pin(monkeypatch, good)
    before = fetch.fetch(wheel=good)
    bad = _wheel(tmp_path / "bad.whl", {"bfcl_eval/data/a.json": '{"tampered": 1}\n'})
    with pytest.raises(DataError, match="expected"):
        fetch.fetch(force=True, wheel=bad)
    assert fetch.fetched_dir() == before
    assert (before / "data" / "a.json").read_text() == "{}\n"


def test_a_path_that_leaves_the_cache_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path / "cache"))
    evil = _wheel(tmp_path / "evil.whl", {"bfcl_eval/data/../../../../escaped.json": "{}\n"})
    _pin(monkeypatch, evil)
    with pytest.raises(DataError, match="unsafe path"):
        fetch.fetch(wheel=evil)
    assert fetch.fetched_dir() is None
    assert not list(tmp_path.rglob("escaped.json"))
