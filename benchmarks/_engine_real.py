"""The rows of `benchmarks/engine.py --model DIR`: the paged engine at a real model's size.

Every row runs ours and HF `generate` on the same model directory, prompts and sampling in this
process, best of `rounds` interleaved runs per side (HF generate's time varies run to run). "Ours,
default" is the engine as RL rollout builds it (`rollout.weights: auto`: bf16 or int8 rollout
weights by what the CPU runs, quant.py); "ours, exact" is fp32 (the trainer's weights).

1. RL shape: 16 prompts x 8 samples, T=1, each request's own length spread over 64..256 new
   tokens (EOS suppressed on both sides); HF generate gets one batch of 128 with max_new_tokens =
   256 (a static batch runs until its longest row ends: only each request's own tokens count);
2. 64 mixed-length requests: prompts of 20-60 tokens, outputs spread over 16..256, greedy;
3. the weights-only forward at equal dtype and batch: the engine's own compute weights (each
   layer's matmuls and the LM head, nothing else) on random activations of 128 and 64 rows, and
   over the RL shape's own sequence of decode batch sizes (128 rows shrinking to 1 as requests
   end); ours in the RL shape as a fraction of the latter (and of the 128-row figure);
4. batch 1, a chat prompt, 128 new greedy tokens: HF fp32 / bf16, ours standard and fast (the
   options of `posttrain serve --mode standard|fast`: exact weights; int8 weight-only + n-gram
   drafts) and the RL default's weights (auto) with drafts; each against the bandwidth bound (bytes of compute weights read per token / this
   machine's measured copy bandwidth);
5. the quality cost of each inexact weights mode on 8 fixed chat prompts, 48 greedy tokens: greedy outputs
   identical to standard's, and the max and mean |logprob error| of the fast engine's reported
   logprobs against fp32 HF teacher-forced on the fast outputs;
6. memory: KV bytes per token and the peak RSS of a fresh process holding an 8k-token context
   (one 8000-token prompt, then 16 new tokens) for fp32, bf16 and int8 KV.

`rows` returns the RL-shape ratio (ours default / HF fp32): engine.py's last line.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import torch

from posttrain.engine.protocol import SamplingParams

from posttrain.engine.registry import ENGINES

CHAT = ["What is the capital of France?", "Write a Python function that reverses a string.",
        "Explain photosynthesis in one sentence.", "What is 17 * 23?", "List three colors.",
        "Who wrote Hamlet?", "Translate 'good morning' to Spanish.", "What is a prime number?"]


def load(path: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    return tok, {dt: AutoModelForCausalLM.from_pretrained(path, dtype=dt).eval() for dt in (torch.float32, torch.bfloat16)}


def chat_ids(tok, text: str) -> list[int]:
    return list(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        return_dict=True)["input_ids"])


def random_prompts(tok, n: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    special = set(tok.all_special_ids)
    vocab = [i for i in range(len(tok)) if i not in special]
    return [[rng.choice(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def spread(n: int, lo: int, hi: int) -> list[int]:
    return [lo + round(i * (hi - lo) / max(1, n - 1)) for i in range(n)]


def hf_run(model, tok, prompts, lengths, sample: bool) -> float:
    """Seconds for one left-padded `generate` over all prompts (EOS suppressed, max = the longest)."""
    width, pad = max(len(p) for p in prompts), tok.pad_token_id if tok.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kw = dict(max_new_tokens=max(lengths), min_new_tokens=max(lengths), do_sample=sample, pad_token_id=pad,
              eos_token_id=None, **({"temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {}))
    with torch.inference_mode():
        model.generate(input_ids=ids[:2, -8:], attention_mask=mask[:2, -8:], max_new_tokens=2, do_sample=False,
                       pad_token_id=pad)
        t = time.perf_counter()
        model.generate(input_ids=ids, attention_mask=mask, **kw)
        return time.perf_counter() - t


def ours_run(engine, prompts, params) -> tuple[float, list]:
    warm = prompts[:2]
    engine.generate(warm, [SamplingParams(temperature=0.0, max_tokens=2)] * len(warm))
    t = time.perf_counter()
    out = engine.generate(prompts, params)
    return time.perf_counter() - t, out


def engine(path: str, tok, **options):
    options.setdefault("speculative", None)
    return ENGINES["paged"](path, tok, device="cpu", **options)


def batched_row(name, path, tok, hf, prompts, lengths, sample: bool, rounds: int) -> tuple[dict, object]:
    useful = sum(lengths)
    params = [SamplingParams(temperature=1.0 if sample else 0.0, max_tokens=n, stop_token_ids=(), seed=i)
              for i, n in enumerate(lengths)]
    ours = {"default": engine(path, tok, weights="auto"), "exact": engine(path, tok)}
    best = {k: float("inf") for k in ("hf fp32", "hf bf16", "ours default", "ours exact")}
    for _ in range(rounds):
        best["hf fp32"] = min(best["hf fp32"], hf_run(hf[torch.float32], tok, prompts, lengths, sample))
        best["hf bf16"] = min(best["hf bf16"], hf_run(hf[torch.bfloat16], tok, prompts, lengths, sample))
        for k, e in ours.items():
            best[f"ours {k}"] = min(best[f"ours {k}"], ours_run(e, prompts, params)[0])
    rate = {k: useful / s for k, s in best.items()}
    d = ours["default"]
    equal = "hf bf16" if d.dtype == torch.bfloat16 else "hf fp32"
    print(f"[{name}] {len(prompts)} requests, {useful} useful tokens, best of {rounds}: "
          + ", ".join(f"{k} {v:,.0f} tok/s" for k, v in rate.items())
          + f"; ours default = weights {d.weights}: x{rate['ours default'] / rate['hf fp32']:.2f} HF fp32, "
          f"x{rate['ours default'] / rate[equal]:.2f} {equal} (equal dtype); "
          f"ours exact x{rate['ours exact'] / rate['hf fp32']:.2f} HF fp32")
    return rate, d


def weights_only_seconds(e, rows: int, reps: int = 3) -> float:
    """Seconds of one pass of the engine's own matmuls (every layer's and the LM head, nothing
    else) over `rows` random rows: the weights-only forward (best of `reps`)."""
    m = e.model
    keys = list(m.linears())
    xs = [torch.randn(rows, w.shape[1], dtype=m.dtype) for _, w, _ in keys]

    def run() -> None:
        with torch.inference_mode():
            for (key, w, b), x in zip(keys, xs):
                m._linear(x, key, w, b)

    run()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    return best


def schedule_bound(e, lengths: list[int]) -> float:
    """tokens/s of the weights-only forward over the decode batches the RL shape runs: all
    requests start together, so decode step s has one row per request longer than s."""
    sizes = [sum(n > s for n in lengths) for s in range(max(lengths))]
    cost = {m: weights_only_seconds(e, m, reps=1) for m in sorted(set(sizes))}
    return sum(lengths) / sum(cost[m] for m in sizes)


def bandwidth_gbs() -> float:
    src = torch.empty(256 << 20, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    return 2 * 5 * src.numel() / (time.perf_counter() - t) / 1e9  # read + write


def weight_bytes(e) -> int:
    q = e.model.quant
    if q is not None:
        return sum(lin.weight_t.numel() if hasattr(lin, "weight_t") else lin.weight.numel() for lin in q.layers.values())
    return sum(w.numel() * w.element_size() for _, w, _ in e.model.linears())


def batch1_row(path, tok, hf, rounds: int) -> None:
    prompt = chat_ids(tok, "Write a Python function that checks whether a number is prime, and explain it.")
    n, gbs = 128, bandwidth_gbs()
    params = [SamplingParams(temperature=0.0, max_tokens=n, stop_token_ids=())]
    rates = {}
    for dt, name in ((torch.float32, "hf fp32"), (torch.bfloat16, "hf bf16")):
        rates[name] = n / min(hf_run(hf[dt], tok, [prompt], [n], False) for _ in range(rounds))
    from posttrain.engine.server.app import SERVE_MODES

    engines = {"standard": engine(path, tok, **SERVE_MODES["standard"]), "fast": engine(path, tok, **SERVE_MODES["fast"]),
               "auto weights + ngram": engine(path, tok, weights="auto", speculative="ngram")}
    for name, e in engines.items():
        rates[f"ours {name}"] = n / min(ours_run(e, [prompt], params)[0] for _ in range(rounds))
    bounds = {f"ours {k}": gbs * 1e9 / weight_bytes(e) for k, e in engines.items()}
    print(f"[batch 1, 128 greedy tokens, copy bandwidth {gbs:.0f} GB/s] "
          + ", ".join(f"{k} {v:,.1f} tok/s" + (f" ({v / bounds[k]:.0%} of its bound {bounds[k]:,.0f})" if k in bounds else "")
                      for k, v in rates.items())
          + f"; fast x{rates['ours fast'] / rates['hf fp32']:.2f} HF fp32 (target >= 2.5), "
          f"auto weights + ngram x{rates['ours auto weights + ngram'] / rates['hf fp32']:.2f}")


def quality_row(path, tok, hf) -> None:
    prompts = [chat_ids(tok, t) for t in CHAT]
    params = [SamplingParams(temperature=0.0, max_tokens=48)] * len(prompts)
    standard = engine(path, tok).generate(prompts, params)
    for mode in ("auto", "int8", "int8-weight-only", "bf16"):
        e = engine(path, tok, weights=mode)
        out = e.generate(prompts, params)
        same = sum(a.token_ids == b.token_ids for a, b in zip(out, standard))
        errs = []
        with torch.inference_mode():
            for p, c in zip(prompts, out):
                ids = torch.tensor([p + list(c.token_ids)])
                lp = torch.log_softmax(hf[torch.float32](ids).logits[0, len(p) - 1 : -1].float(), -1)
                exact = lp.gather(1, torch.tensor(c.token_ids)[:, None]).squeeze(1)
                errs += (exact - torch.tensor(c.logprobs)).abs().tolist()
        print(f"[quality, weights {mode} = {e.weights}] greedy identical to standard {same}/{len(prompts)}; "
              f"|logprob error| vs fp32: max {max(errs):.3f}, mean {sum(errs) / len(errs):.4f}")


_MEM = """
import json, sys, torch
from transformers import AutoTokenizer
from posttrain.engine.protocol import SamplingParams
from posttrain.engine.registry import ENGINES
path, weights, kv = sys.argv[1:4]
torch.set_num_threads(int(sys.argv[4]))
from transformers import AutoConfig
from posttrain.engine.paged import quant
from posttrain.engine.paged.cache import KVCache
from posttrain.engine.paged.config import ModelSpec
tok = AutoTokenizer.from_pretrained(path)
spec = ModelSpec.from_hf(AutoConfig.from_pretrained(path))
mode = quant.resolve_mode(weights, torch.device("cpu"), spec.num_parameters)
dtype = torch.bfloat16 if mode in ("bf16", "int8-weight-only") else torch.float32
bpt = KVCache.bytes_per_token(spec.num_layers, spec.num_kv_heads, spec.head_dim, dtype, kv)
e = ENGINES["paged"](path, tok, device="cpu", weights=weights, kv_dtype=kv, speculative=None, max_model_len=8192,
                     kv_cache_bytes=bpt * 8208)
e.generate([[(7 * i) % 40000 + 100 for i in range(8000)]], [SamplingParams(temperature=0.0, max_tokens=16)])
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so it would report the parent's peak
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"bytes_per_token": bpt, "peak_rss_mb": int(hwm) / 1024}))
"""


def memory_row(path) -> None:
    for weights, kv in (("exact", "auto"), ("bf16", "auto"), ("exact", "int8"), ("auto", "auto")):
        out = subprocess.run([sys.executable, "-c", _MEM, path, weights, kv, str(torch.get_num_threads())],
                             capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        label = {"auto": "model dtype"}.get(kv, kv)
        print(f"[memory, 8k context] weights {weights}, KV {label}: {r['bytes_per_token']:,} KV bytes/token "
              f"({r['bytes_per_token'] * 8192 / 2**20:,.0f} MiB at 8k), peak RSS {r['peak_rss_mb']:,.0f} MiB")


def rows(path: str, rounds: int, skip: set[str]) -> float:
    tok, hf = load(path)
    ratio = float("nan")
    if "rl" not in skip:
        prompts = [p for p in random_prompts(tok, 16, 20, 60, seed=1) for _ in range(8)]
        rl_rate, default = batched_row("RL shape 16x8, T=1, 64..256 tokens", path, tok, hf, prompts,
                                       spread(128, 64, 256), True, rounds)
        ratio = rl_rate["ours default"] / rl_rate["hf fp32"]
    if "mixed" not in skip:
        batched_row("64 mixed-length, greedy, 16..256 tokens", path, tok, hf, random_prompts(tok, 64, 20, 60, seed=2),
                    spread(64, 16, 256), False, rounds)
    if "bound" not in skip and "rl" not in skip:
        exact = engine(path, tok)
        for e in (default, exact):
            b = {r: r / weights_only_seconds(e, r) for r in (128, 64)}
            sched = schedule_bound(e, spread(128, 64, 256))
            ours = rl_rate["ours default" if e is default else "ours exact"]
            print(f"[weights-only forward, weights {e.weights}, {str(e.dtype).removeprefix('torch.')}] 128 rows "
                  f"{b[128]:,.0f} tok/s, 64 rows {b[64]:,.0f}, over the RL shape's decode batches {sched:,.0f}; "
                  f"ours in the RL shape = {ours / sched:.0%} of it at equal batch (target >= 70%), "
                  f"{ours / b[128]:.0%} of the 128-row figure")
    if "batch1" not in skip:
        batch1_row(path, tok, hf, rounds)
    if "quality" not in skip:
        quality_row(path, tok, hf)
    if "memory" not in skip:
        memory_row(path)
    return ratio
