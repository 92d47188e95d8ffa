"""`posttrain models convert`: a tiny GGUF written here converts into an HF directory that plain
`from_pretrained` loads, logit-for-logit equal to transformers' own GGUF load; bad input is one
line naming the file, and nothing is left behind."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posttrain.core.errors import ModelLoadError
from posttrain.models.convert import SOURCE_NOTE, convert_gguf, inspect_gguf
from posttrain.core.types import Task
from tests.unit.models.tiny_gguf import write_tiny_gguf

CHAT = [{"role": "user", "content": "Calculate 12 + 34."}]
ROOT = Path(__file__).resolve().parents[3]


def _gguf_load(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


@pytest.mark.parametrize("qtype", ["F32", "Q4_1"])
def test_converted_directory_matches_transformers_gguf_load(gguf_dir, tmp_path, qtype, tiny_llama, tiny_tokenizer):
    from posttrain.core.hf import load_model_and_tokenizer

    src = gguf_dir / f"tiny-{qtype}.gguf"
    out = tmp_path / "hf"
    done = convert_gguf(src, out)
    assert done.out == out and not done.warnings and _leftovers(tmp_path) == []
    assert done.info.tensor_types == ({"F32": 20} if qtype == "F32" else {"Q4_1": 15, "F32": 5})

    model, tok = load_model_and_tokenizer(str(out), "float32", torch.device("cpu"))  # plain from_pretrained
    ref_model, ref_tok = _gguf_load(src)
    text = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == ref_tok(text, add_special_tokens=False)["input_ids"]
    assert ids == tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        ours, theirs = model(x).logits, ref_model(x).logits
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
        if qtype == "F32":  # lossless: the writer's llama.cpp layout round-trips to the original
            torch.testing.assert_close(ours, tiny_llama(x).logits, atol=1e-5, rtol=0)
    assert all(p.dtype == torch.float32 for p in model.parameters())

    assert tok.chat_template == tiny_tokenizer.chat_template
    assert (out / "chat_template.jinja").is_file() and (out / "model.safetensors").is_file()
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert config["bos_token_id"] is None and config["eos_token_id"] == tiny_tokenizer.eos_token_id
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tiny_tokenizer.eos_token_id and gen["pad_token_id"] == tiny_tokenizer.pad_token_id
    note = json.loads((out / SOURCE_NOTE).read_text())
    assert note["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert note["source_file"] == str(src.resolve()) and note["package"] is None
    assert note["architecture"] == "llama" and note["tensor_types"] == done.info.tensor_types
    assert note["transformers_version"] and note["converted_at"]


def test_no_chat_template_warns_and_rl_refuses_it(gguf_dir, tmp_path):
    from posttrain.envs.single_turn import prompt_ids
    from posttrain.core.hf import load_tokenizer

    done = convert_gguf(gguf_dir / "tiny-notemplate.gguf", tmp_path / "hf")
    assert len(done.warnings) == 1 and "no chat template" in done.warnings[0]
    assert "tiny-notemplate.gguf" in done.warnings[0]
    assert not (tmp_path / "hf" / "chat_template.jinja").exists()
    task = Task(id="t", domain="d", prompt=tuple(CHAT), reference="46")
    with pytest.raises(ModelLoadError, match="no chat template") as info:
        prompt_ids(load_tokenizer(str(tmp_path / "hf")), task)
    assert str(info.value).startswith(str(tmp_path / "hf"))


def test_existing_output_is_kept_unless_force(gguf_dir, tmp_path):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(ModelLoadError, match="not empty"):
        convert_gguf(gguf_dir / "tiny-F32.gguf", out)
    assert (out / "mine.txt").read_text() == "keep me"
    convert_gguf(gguf_dir / "tiny-F32.gguf", out, force=True)
    assert not (out / "mine.txt").exists() and (out / "config.json").is_file()
    assert _leftovers(tmp_path) == []


def _bad_files(folder: Path, good: Path, model, tokenizer) -> dict[str, tuple[Path, str]]:
    data = good.read_bytes()
    cases = {
        "missing": (folder / "absent.gguf", None, "file not found"),
        "empty": (folder / "empty.gguf", b"", "empty file"),
        "wrong magic": (folder / "magic.gguf", b"GGML" + data[4:], "not a GGUF file"),
        "text file": (folder / "notes.gguf", b"hello world\n" * 20, "not a GGUF file"),
        "truncated header": (folder / "cut-header.gguf", data[:200], "corrupt or truncated"),
        "truncated tensors": (folder / "cut-data.gguf", data[: len(data) - 4096], "corrupt or truncated"),
    }
    out = {}
    for key, (path, content, expect) in cases.items():
        if content is not None:
            path.write_bytes(content)
        out[key] = (path, expect)
    arch = write_tiny_gguf(model, tokenizer, folder / "arch.gguf", arch="frobnicator")
    out["unsupported architecture"] = (arch, "architecture 'frobnicator' cannot be loaded")
    f64 = write_tiny_gguf(model, tokenizer, folder / "f64.gguf", f64_norms=True)
    out["unsupported tensor type"] = (f64, "tensor type F64")
    return out


def test_bad_input_is_one_line_naming_the_file_and_leaves_nothing(gguf_dir, tmp_path, tiny_llama, tiny_tokenizer):
    src = tmp_path / "src"
    src.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    for case, (path, expect) in _bad_files(src, gguf_dir / "tiny-F32.gguf", tiny_llama, tiny_tokenizer).items():
        with pytest.raises(ModelLoadError) as info:
            convert_gguf(path, dest / "hf")
        message = str(info.value)
        assert "\n" not in message and message.startswith(str(path)) and expect in message, (case, message)
        assert list(dest.iterdir()) == [], case
    arch_error = str(pytest.raises(ModelLoadError, inspect_gguf, src / "arch.gguf").value)
    assert "llama" in arch_error and "qwen2" in arch_error  # the supported ones are listed
    type_error = str(pytest.raises(ModelLoadError, inspect_gguf, src / "f64.gguf").value)
    assert "Q4_1" in type_error and "F32" in type_error


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a model")
    out = subprocess.run([sys.executable, "-m", "posttrain.cli", "models", "convert", str(bad), "--out",
                          str(tmp_path / "hf")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1 and str(bad) in lines[0] and "not a GGUF file" in lines[0]
    assert not (tmp_path / "hf").exists()
