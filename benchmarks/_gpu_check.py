"""The GPU check behind benchmarks/gpu_check.sh: four sections on one CUDA device, nothing downloaded.

    bash benchmarks/gpu_check.sh             # CUDA, Qwen2.5-0.5B's shapes (random weights); under 8 minutes
    bash benchmarks/gpu_check.sh --dry-run   # the CPU, tiny shapes (2 layers, hidden 64), same code paths

The model is random-initialised with the shapes of Qwen2.5-0.5B's config (written below, no hub) and the
repo's own small tokenizer (token ids past its vocabulary decode to nothing; speed does not depend on the
weights). Sections, each calling the existing benchmark's code with a device:
1. engine: the paged engine vs HF `generate` (benchmarks/engine.py `throughput_row`: mixed-length
   requests, greedy, EOS suppressed), bf16 on CUDA, fp32 on the CPU;
2. rl: RL steps of our recipe (dynamic sampling off) vs TRL's GRPOTrainer (benchmarks/rl_vs_trl.py
   `run_ours` / `run_trl`), the steady step after the warm-up ones;
3. fsdp2: the RL train step under FSDP2 in a 1-rank process group (nccl on CUDA, gloo on the CPU) vs
   the plain `train_step` on the same groups from the same weights: step time and weight difference;
4. vllm: the vllm engine on the engine section's requests, if vLLM imports.
Each section prints `result: <what> = X (target >= Y)`, or `skipped: <what> (<why>)`, or
`failed: <what> (<error in one line>)`; the exit status is 1 when any section failed.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

warnings.filterwarnings("ignore", category=FutureWarning)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import engine as engine_bench  # noqa: E402  (benchmarks/engine.py)
from posttrain.core.errors import one_line  # noqa: E402

# Qwen2.5-0.5B's config.json (the shapes that decide a step's cost), written here: nothing from the hub
QWEN25_05B = dict(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
                  intermediate_size=4864, max_position_embeddings=32768, rope_theta=1_000_000.0)
TINY = dict(vocab_size=None, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
            max_position_embeddings=1024, rope_theta=10_000.0)  # vocab_size None: the tokenizer's

# per mode: engine requests and rounds; RL steps (the last ones timed), prompts x group, max tokens;
# FSDP2 groups x samples and completion length
SIZES = {
    "real": dict(requests=64, rounds=2, rl_steps=3, prompts=16, group=8, max_tokens=64, groups=8, k=8, comp=128),
    "dry": dict(requests=4, rounds=1, rl_steps=1, prompts=2, group=2, max_tokens=8, groups=2, k=2, comp=8),
}


def build_model(out: Path, shape: dict) -> tuple[str, object]:
    """A random Qwen2 of `shape` with the repo's tokenizer, saved to `out` (both sides load it from disk)."""
    from transformers import AutoModelForCausalLM

    from posttrain.train.tiny import save_model, tiny_config
    from posttrain.train.tokenizer import build_tokenizer

    corpus = [f"the cat sat on the mat and {a} + {b} = {a + b}" for a in range(60) for b in range(60)]
    tok = build_tokenizer(corpus, vocab_size=1024)
    sizes = {k: v for k, v in shape.items() if k not in ("vocab_size", "rope_theta")}
    config = tiny_config("qwen2", vocab_size=shape["vocab_size"] or len(tok), pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id, **sizes)
    config.rope_theta = shape["rope_theta"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = tok.pad_token_id, tok.eos_token_id
    save_model(model, tok, out)
    return str(out), tok


def engine_section(ctx) -> str:
    dtype = torch.bfloat16 if ctx.cuda else torch.float32
    ratio = engine_bench.throughput_row(ctx.path, ctx.tok, ctx.sizes["requests"], dtype, f"engine, {ctx.dtype_name}",
                                        rounds=ctx.sizes["rounds"], device=ctx.device)
    return f"engine tok/s ours/HF generate ({ctx.dtype_name}) = {ratio:.2f} (target >= 3)"


def rl_section(ctx) -> str:
    import rl_vs_trl
    from _models import task_options

    if not ctx.has_trl:
        raise Skip("TRL is not installed (pip install trl)")
    s = ctx.sizes
    args = SimpleNamespace(model=ctx.path, steps=s["rl_steps"], prompts=s["prompts"], group=s["group"], lr=2e-5,
                           max_tokens=s["max_tokens"], holdout=None, rollout_weights="auto", ours_threads=1)
    rl_vs_trl.OPTIONS.update(task_options(None, ctx.path, rl_vs_trl.DOMAINS))
    ours = rl_vs_trl.run_ours(args, ctx.tmp / "rl_ours", dynamic_sampling=False)
    trl = rl_vs_trl.run_trl(args, ctx.tmp / "rl_trl")
    print(f"[rl, {s['prompts']} prompts x {s['group']}, <= {s['max_tokens']} tokens, {s['rl_steps']} steps] s/step "
          f"ours {ours['s_per_step']:.2f} (rollout {ours['rollout']:.2f}, update {ours['update']:.2f}), TRL "
          f"{trl['s_per_step']:.2f} (rollout {trl['rollout']:.2f}, update {trl['update']:.2f})", flush=True)
    return f"rl step time TRL/ours = {trl['s_per_step'] / ours['s_per_step']:.2f} (target >= 2)"


def synthetic_groups(vocab: int, n_groups: int, k: int, comp: int, seed: int = 0) -> list:
    """Groups of random in-vocabulary token ids with sampler logprobs and 0/1 rewards (signal in each)."""
    from posttrain.core.types import Group, Task, Trajectory

    rng, groups = random.Random(seed), []
    for g in range(n_groups):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(16, 48))]
        trajs = []
        for j in range(k):
            done = [rng.randrange(3, vocab) for _ in range(rng.randint(comp // 2, comp))]
            trajs.append(Trajectory(f"t{g}", prompt + done, [0] * len(prompt) + [1] * len(done),
                                    [0.0] * len(prompt) + [-rng.uniform(0.5, 6.0) for _ in done], len(prompt),
                                    reward=float(j % 2)))
        groups.append(Group(Task(f"t{g}", "d", ({"role": "user", "content": "x"},), None), tuple(trajs),
                            tuple(t.reward for t in trajs)))
    return groups


def fsdp2_section(ctx) -> str:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from posttrain.config.rl import RLConfig
    from posttrain.core.hf import load_model
    from posttrain.train.distributed.group import free_port, init_group, teardown
    from posttrain.train.distributed.trainer import dist_train_step, wrap_policy
    from posttrain.train.optim import build_optimizer, build_scheduler
    from posttrain.train.step import train_step

    s = ctx.sizes
    groups = synthetic_groups(len(ctx.tok), s["groups"], s["k"], s["comp"])
    cfg = RLConfig.model_validate({"model": {"path": ctx.path}, "optim": {"lr": 1e-5, "warmup_steps": 0,
                                                                           "schedule": "constant"}})
    pad, dev = ctx.tok.pad_token_id, torch.device(ctx.device)

    def steps(step_fn, model) -> float:
        """Two steps on the same groups; seconds of the second (the first allocates and warms up)."""
        for _ in range(2):
            t = time.perf_counter()
            step_fn(model)
            if ctx.cuda:
                torch.cuda.synchronize()
        return time.perf_counter() - t

    plain = load_model(ctx.path, dtype="float32", device=dev)
    opt = build_optimizer(plain, cfg.optim)
    sched = build_scheduler(opt, cfg.optim, 10)
    plain_s = steps(lambda m: train_step(m, None, opt, sched, groups, cfg, pad_id=pad, device=dev), plain)
    init_group(0, 1, free_port(), backend="nccl" if ctx.cuda else "gloo")
    try:
        policy = wrap_policy(load_model(ctx.path, dtype="float32", device=dev), "fsdp2")
        dopt = build_optimizer(policy.model, cfg.optim)
        dsched = build_scheduler(dopt, cfg.optim, 10)
        fsdp_s = steps(lambda p: dist_train_step(p, None, dopt, dsched, groups, cfg, pad_id=pad, device=dev), policy)
        full = get_model_state_dict(policy.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    finally:
        teardown()
    own = plain.state_dict()
    diff = max(float((full[k].float() - own[k].float().cpu()).abs().max()) for k in own)
    tokens = sum(len(t.token_ids) for g in groups for t in g.trajectories)
    print(f"[fsdp2, 1 rank, fp32, {len(groups)} groups x {s['k']}, {tokens} tokens] s/step plain {plain_s:.3f}, "
          f"fsdp2 {fsdp_s:.3f}; max |weights fsdp2 - plain| after 2 steps {diff:.2e}", flush=True)
    if diff > 1e-3:
        raise RuntimeError(f"FSDP2's update differs from the plain step's: max |delta weight| {diff:.2e} > 1e-3")
    return f"fsdp2 1-rank step time plain/fsdp2 = {plain_s / fsdp_s:.2f} (target >= 0.8)"


def vllm_section(ctx) -> str:
    from posttrain.engine.protocol import SamplingParams
    from posttrain.engine.registry import ENGINES

    try:
        import vllm  # noqa: F401
    except ImportError as e:
        raise Skip(f"vLLM does not import: {one_line(e)}") from None
    if not ctx.cuda:
        raise Skip("vLLM needs CUDA")
    n = ctx.sizes["requests"]
    prompts, lengths = engine_bench.make_prompts(ctx.tok, n), engine_bench.spread(n, 16, 256)
    params = [SamplingParams(temperature=0.0, max_tokens=m, stop_token_ids=()) for m in lengths]
    rates = {}
    for name, make in (("ours", lambda: engine_bench.paged(ctx.path, ctx.tok, ctx.device, dtype=torch.bfloat16)),
                       ("vLLM", lambda: ENGINES["vllm"](ctx.path, ctx.tok, dtype="bfloat16", gpu_memory_utilization=0.5,
                                                        max_model_len=1024))):
        e = make()
        secs, out = engine_bench.run_ours(e, prompts, params)
        rates[name] = sum(len(c.token_ids) for c in out) / secs
        del e
        torch.cuda.empty_cache()
    print(f"[vllm, {n} requests, 16..256 tokens, bf16] tok/s ours {rates['ours']:,.0f}, vLLM {rates['vLLM']:,.0f}",
          flush=True)
    return f"engine tok/s ours/vLLM = {rates['ours'] / rates['vLLM']:.2f} (target >= 0.5)"


class Skip(Exception):
    """A section that cannot run here, with the reason."""


SECTIONS = (("engine vs HF generate", engine_section), ("RL step vs TRL GRPOTrainer", rl_section),
            ("FSDP2 on one device", fsdp2_section), ("vLLM engine", vllm_section))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="the CPU with tiny shapes (CI): same code paths")
    ap.add_argument("--only", default="", help="comma list of section numbers (1-4) to run")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.dry_run
    if not args.dry_run and not cuda:
        print("error: no CUDA device here: run `bash benchmarks/gpu_check.sh --dry-run` for the CPU dry run")
        return 2
    if args.dry_run:
        torch.set_num_threads(min(2, os.cpu_count() or 1))
    try:
        import trl  # noqa: F401
        has_trl = True
    except ImportError:
        has_trl = False
    mode = "dry" if args.dry_run else "real"
    shape = TINY if args.dry_run else QWEN25_05B
    only = {int(x) for x in args.only.split(",") if x}
    failed = 0
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as d:
        t0 = time.perf_counter()
        path, tok = build_model(Path(d) / "model", shape)
        ctx = SimpleNamespace(path=path, tok=tok, tmp=Path(d), cuda=cuda, device="cuda" if cuda else "cpu",
                              dtype_name="bf16" if cuda else "fp32", sizes=SIZES[mode], has_trl=has_trl)
        where = torch.cuda.get_device_name(0) if cuda else f"CPU, {torch.get_num_threads()} threads"
        print(f"gpu check ({'dry run' if args.dry_run else 'real'}): random Qwen2, hidden {shape['hidden_size']}, "
              f"{shape['num_layers']} layers, vocab {shape['vocab_size'] or len(tok)}; {where}; model built in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        for i, (what, fn) in enumerate(SECTIONS, 1):
            if only and i not in only:
                continue
            t = time.perf_counter()
            try:
                line = fn(ctx)
            except Skip as e:
                line = f"skipped: {what} ({e})"
            except BaseException as e:  # noqa: BLE001  (one line per section; the next one still runs)
                if isinstance(e, KeyboardInterrupt):
                    raise
                failed += 1
                line = f"failed: {what} ({one_line(e)})"
            else:
                line = f"result: {line}"
            print(f"({what}: {time.perf_counter() - t:.0f} s)\n{line}", flush=True)
    print(f"gpu check: {failed} section(s) failed" if failed else "gpu check: no section failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
