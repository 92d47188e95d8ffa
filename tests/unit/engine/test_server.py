"""The OpenAI-compatible server on a real uvicorn on 127.0.0.1, driven by the official `openai`
client and raw httpx: outputs equal the engine's own, concurrent requests share engine calls
(HF engine: windowed `generate` batches; a scripted SteppingEngine: continuous batching), stop
strings, disconnects abort, and bad requests get OpenAI error bodies while the server keeps going.
"""

from __future__ import annotations

import copy
import json
import random
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
import torch

from posttrain.engine import Completion, HFEngine, SamplingParams
from posttrain.engine.protocol import StepOutput, SteppingEngine
from posttrain.engine.server.app import build_app
from posttrain.engine.server.api import TextStream

openai = pytest.importorskip("openai")

PROMPTS = ["Calculate 1 + 2.", "We add 12 and", "x", "Calculate 345 + 678 and then", "Answer:", "7", "We add", "+ 1"]


@contextmanager
def running(app):
    """Serve `app` with uvicorn on a free 127.0.0.1 port in a thread; yields the base URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class ScriptedEngine:
    """A real SteppingEngine whose "model" is arithmetic: the next token is a hash of the sequence
    so far (plus a draw from the request's own seeded RNG when temperature > 0) and its logprob a
    function of the token. Each `step` advances every unfinished request by one token and counts
    as one forward pass. Stop strings are left to the server (so its own stop handling is tested)."""

    def __init__(self, vocab: int, step_delay_s: float = 0.0):
        self.vocab, self.step_delay_s, self.version = vocab, step_delay_s, 0
        self.steps = 0
        self.aborted: list[int] = []
        self._lock = threading.Lock()
        self._live: dict[int, dict] = {}
        self._to_abort: set[int] = set()
        self._next = 0

    def add_request(self, prompt_ids, params: SamplingParams) -> int:
        with self._lock:
            rid, self._next = self._next, self._next + 1
            self._live[rid] = {"seq": list(prompt_ids), "n": 0, "p": params, "rng": random.Random(params.seed)}
            return rid

    def abort(self, request_id: int) -> None:
        with self._lock:
            self._to_abort.add(request_id)

    def has_unfinished(self) -> bool:
        with self._lock:
            return bool(self._live)

    def step(self) -> list[StepOutput]:
        time.sleep(self.step_delay_s)
        with self._lock:
            self.steps += 1
            outs = []
            for rid, r in list(self._live.items()):
                if rid in self._to_abort:
                    self.aborted.append(rid)
                    del self._live[rid]
                    outs.append(StepOutput(rid, [], [], True, "abort"))
                    continue
                p, seq = r["p"], r["seq"]
                noise = r["rng"].randrange(self.vocab) if p.temperature > 0 else 0
                tok = (31 * sum(seq) + 7 * len(seq) + noise) % (self.vocab - 3) + 3
                seq.append(tok)
                r["n"] += 1
                finish = "stop" if tok in p.stop_token_ids else "length" if r["n"] >= p.max_tokens else None
                if finish:
                    del self._live[rid]
                outs.append(StepOutput(rid, [tok], [-1.0 - (tok % 7) / 10], finish is not None, finish))
            self._to_abort.clear()
            return outs

    def generate(self, prompts, params) -> list[Completion]:
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, params)]
        got: dict[int, list] = {i: [[], [], None] for i in ids}
        while self.has_unfinished():
            for o in self.step():
                got[o.request_id][0] += o.token_ids
                got[o.request_id][1] += o.logprobs
                got[o.request_id][2] = o.finish_reason
        return [Completion(tuple(got[i][0]), tuple(got[i][1]), got[i][2]) for i in ids]

    def update_weights(self, state_dict, version: int) -> None:
        self.version = version


class PlainEngine:
    """The scripted engine behind `generate` only (no step interface); counts calls and fails
    any request whose prompt holds token 13."""

    def __init__(self, vocab: int):
        self.inner, self.version, self.calls = ScriptedEngine(vocab), 0, 0

    def generate(self, prompts, params):
        self.calls += 1
        if any(13 in p for p in prompts):
            raise ValueError("token 13 is not allowed here")
        return self.inner.generate(prompts, params)

    def update_weights(self, state_dict, version):
        self.version = version


@pytest.fixture(scope="module")
def hf(sharp_model, tiny_tokenizer):
    """A server over an HFEngine (forward passes counted) and a reference engine on the same weights."""
    engine = HFEngine(copy.deepcopy(sharp_model), pad_token_id=0, tokenizer=tiny_tokenizer)
    forwards = [0]
    engine.model.register_forward_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    reference = HFEngine(copy.deepcopy(sharp_model), pad_token_id=0, tokenizer=tiny_tokenizer)
    with running(build_app(engine, tiny_tokenizer, "tiny", batch_window_s=0.05)) as url:
        yield url, forwards, reference


def client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)


def ids_of(tokenizer, text: str) -> list[int]:
    return tokenizer(text)["input_ids"]


def test_openai_client_matches_engine(hf, tiny_tokenizer):
    url, _, ref = hf
    c = client(url)
    assert [m.id for m in c.models.list().data] == ["tiny"]
    eos = (tiny_tokenizer.eos_token_id,)
    r = c.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=10, temperature=0, logprobs=1)
    want = ref.generate([ids_of(tiny_tokenizer, PROMPTS[0])], [SamplingParams(0.0, max_tokens=10, stop_token_ids=eos)])
    choice = r.choices[0]
    assert tuple(choice.token_ids) == want[0].token_ids and len(want[0].token_ids) == 10
    assert choice.text == tiny_tokenizer.decode(want[0].token_ids, skip_special_tokens=True)
    assert max(abs(a - b) for a, b in zip(choice.logprobs.token_logprobs, want[0].logprobs)) <= 1e-4
    assert choice.finish_reason == "length" and choice.prompt_token_ids == ids_of(tiny_tokenizer, PROMPTS[0])
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (5, 10)
    # token-id prompts and a list of prompts
    r2 = c.completions.create(model="tiny", prompt=[ids_of(tiny_tokenizer, p) for p in PROMPTS[:2]], max_tokens=10,
                              temperature=0)
    assert r2.choices[0].text == choice.text and [ch.index for ch in r2.choices] == [0, 1]
    # streaming gives the same tokens and text
    chunks = list(c.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=10, temperature=0, stream=True,
                                       stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == choice.text
    assert sum((ch.choices[0].token_ids for ch in chunks if ch.choices), []) == list(want[0].token_ids)
    assert chunks[-1].usage.completion_tokens == 10
    # chat: the template's prompt, greedy equals the engine
    messages = [{"role": "user", "content": "Calculate 1 + 2."}]
    prompt = tiny_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                return_dict=True)["input_ids"]
    want = ref.generate([prompt], [SamplingParams(0.0, max_tokens=12, stop_token_ids=eos)])[0]
    chat = c.chat.completions.create(model="tiny", messages=messages, max_completion_tokens=12, temperature=0,
                                     logprobs=True)
    assert chat.choices[0].token_ids == list(want.token_ids) and chat.choices[0].prompt_token_ids == prompt
    assert chat.choices[0].message.content == tiny_tokenizer.decode(want.token_ids, skip_special_tokens=True)
    assert max(abs(e.logprob - w) for e, w in zip(chat.choices[0].logprobs.content, want.logprobs)) <= 1e-4
    streamed = list(c.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0,
                                              stream=True))
    assert streamed[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed) == chat.choices[0].message.content
    assert streamed[-1].choices[0].finish_reason == chat.choices[0].finish_reason


def test_n_seed_and_stop(hf, tiny_tokenizer):
    url, _, ref = hf
    c = client(url)
    kw = dict(model="tiny", prompt=PROMPTS[1], max_tokens=8, temperature=1.0)
    a = c.completions.create(n=3, seed=11, **kw)
    b = c.completions.create(n=3, seed=11, **kw)
    assert [ch.token_ids for ch in a.choices] == [ch.token_ids for ch in b.choices]  # reproducible
    assert len({tuple(ch.token_ids) for ch in a.choices}) == 3  # the n samples differ
    single = c.completions.create(n=1, seed=12, **kw)  # choice j is seed + j
    assert single.choices[0].token_ids == a.choices[1].token_ids
    sampled = ref.generate([ids_of(tiny_tokenizer, PROMPTS[1])],
                           [SamplingParams(1.0, max_tokens=8, seed=11, stop_token_ids=(tiny_tokenizer.eos_token_id,))])
    assert tuple(a.choices[0].token_ids) == sampled[0].token_ids
    # a stop string from the middle of the greedy text ends the text before it
    full = c.completions.create(model="tiny", prompt=PROMPTS[3], max_tokens=12, temperature=0).choices[0]
    stop = full.text[5:8]
    cut = c.completions.create(model="tiny", prompt=PROMPTS[3], max_tokens=12, temperature=0,
                               stop=["never", stop]).choices[0]
    assert cut.finish_reason == "stop" and cut.text == full.text[: full.text.index(stop)]
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)] and len(cut.token_ids) < 12
    streamed = c.completions.create(model="tiny", prompt=PROMPTS[3], max_tokens=12, temperature=0, stop=stop,
                                    stream=True)
    assert "".join(ch.choices[0].text for ch in streamed) == cut.text


def test_concurrent_requests_share_forward_passes(hf, tiny_tokenizer):
    url, forwards, ref = hf
    c = client(url)
    want = ref.generate([ids_of(tiny_tokenizer, p) for p in PROMPTS],
                        [SamplingParams(0.0, max_tokens=8, stop_token_ids=(tiny_tokenizer.eos_token_id,))] * 8)
    before = forwards[0]
    sequential = [c.completions.create(model="tiny", prompt=p, max_tokens=8, temperature=0) for p in PROMPTS]
    used_sequential = forwards[0] - before
    before = forwards[0]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: c.completions.create(model="tiny", prompt=p, max_tokens=8, temperature=0),
                                 PROMPTS))
    used_together = forwards[0] - before
    assert [tuple(r.choices[0].token_ids) for r in together] == [w.token_ids for w in want]
    assert [r.choices[0].text for r in together] == [r.choices[0].text for r in sequential]
    assert used_sequential == sum(len(w.token_ids) for w in want)  # one prefill + one per later token
    assert used_together <= used_sequential / 2, (used_together, used_sequential)


@pytest.fixture(scope="module")
def scripted(tiny_tokenizer):
    engine = ScriptedEngine(len(tiny_tokenizer), step_delay_s=0.002)
    assert isinstance(engine, SteppingEngine)
    with running(build_app(engine, tiny_tokenizer, "scripted", max_model_len=4096)) as url:
        yield url, engine


def test_continuous_batching_with_a_stepping_engine(scripted, tiny_tokenizer):
    url, engine = scripted
    c = client(url)
    lengths = [16, 3, 9, 16, 1, 12, 5, 16]
    alone = ScriptedEngine(len(tiny_tokenizer))
    want = [alone.generate([ids_of(tiny_tokenizer, p)], [SamplingParams(0.0, max_tokens=m)])[0]
            for p, m in zip(PROMPTS, lengths)]
    before = engine.steps
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda pm: c.completions.create(model="scripted", prompt=pm[0], max_tokens=pm[1],
                                                            temperature=0, logprobs=0, extra_body={"ignore_eos": True}),
                            zip(PROMPTS, lengths)))
    steps = engine.steps - before
    assert [tuple(r.choices[0].token_ids) for r in got] == [w.token_ids for w in want]
    assert [tuple(r.choices[0].logprobs.token_logprobs) for r in got] == [w.logprobs for w in want]
    assert steps < sum(lengths) / 2, (steps, sum(lengths))  # sequential would take sum(lengths) steps
    # tokens stream as the engine steps: one chunk per token
    chunks = list(c.completions.create(model="scripted", prompt=PROMPTS[0], max_tokens=16, temperature=0,
                                       stream=True, extra_body={"ignore_eos": True}))
    assert [len(ch.choices[0].token_ids) for ch in chunks] == [1] * 16
    # a stop string the engine does not know: the server cuts the text and aborts the request
    text = got[0].choices[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    aborted_before = len(engine.aborted)
    cut = c.completions.create(model="scripted", prompt=PROMPTS[0], max_tokens=16, temperature=0, stop=stop,
                               extra_body={"ignore_eos": True}).choices[0]
    assert cut.finish_reason == "stop" and cut.text == text[: text.index(stop)]
    wait_for(lambda: len(engine.aborted) == aborted_before + 1 and not engine.has_unfinished())


def wait_for(cond, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_client_disconnect_aborts(scripted, tiny_tokenizer):
    url, engine = scripted
    body = {"model": "scripted", "prompt": "x", "max_tokens": 3000, "ignore_eos": True}
    before = len(engine.aborted)
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=30) as r:
        lines = [json.loads(line[6:]) for line, _ in zip((x for x in r.iter_lines() if x.startswith("data: ")),
                                                         range(3))]
    assert len(lines) == 3 and all(len(x["choices"][0]["token_ids"]) == 1 for x in lines)
    wait_for(lambda: len(engine.aborted) == before + 1 and not engine.has_unfinished())
    with pytest.raises(httpx.ReadTimeout):  # a plain request whose client gives up
        httpx.post(f"{url}/v1/completions", json=body, timeout=0.5)
    wait_for(lambda: len(engine.aborted) == before + 2 and not engine.has_unfinished())
    assert engine.steps < 3000  # neither ran to its end


BAD = [
    ("/v1/completions", {"model": "other", "prompt": "x"}, 404, "model"),
    ("/v1/completions", {"prompt": "x"}, 400, "model"),
    ("/v1/completions", {"model": "plain"}, 400, "prompt"),
    ("/v1/completions", {"model": "plain", "prompt": 5}, 400, "prompt"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "n": 0}, 400, "n"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "n": "three"}, 400, "n"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "max_tokens": 2.5}, 400, "max_tokens"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "temperature": -0.1}, 400, "temperature"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "top_p": 0}, 400, "top_p"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "stop": ""}, 400, "stop"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "logprobs": -1}, 400, "logprobs"),
    ("/v1/completions", {"model": "plain", "prompt": [], "max_tokens": 4}, 400, "prompt"),
    ("/v1/completions", {"model": "plain", "prompt": [1, 400]}, 400, "prompt"),
    ("/v1/completions", {"model": "plain", "prompt": [5] * 60, "max_tokens": 8}, 400, "max_tokens"),
    ("/v1/completions", {"model": "plain", "prompt": [5] * 70}, 400, "prompt"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "echo": True}, 400, "echo"),
    ("/v1/completions", {"model": "plain", "prompt": "x", "presence_penalty": 1.0}, 400, "presence_penalty"),
    ("/v1/chat/completions", {"model": "plain", "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": "plain", "messages": "hi"}, 400, "messages"),
    ("/v1/chat/completions", {"model": "plain", "messages": [{"role": "user", "content": 3}]}, 400,
     "messages.0.content"),
    ("/v1/chat/completions", {"model": "plain", "messages": [{"role": "user", "content": "x"}], "max_tokens": -2},
     400, "max_tokens"),
    ("/v1/chat/completions", {"model": "plain", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
     400, "top_logprobs"),
]


@pytest.fixture(scope="module")
def plain(tiny_tokenizer):
    engine = PlainEngine(len(tiny_tokenizer))
    with running(build_app(engine, tiny_tokenizer, "plain", max_model_len=64, batch_window_s=0.05)) as url:
        yield url, engine


def is_error_body(body: dict) -> bool:
    return set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}


def test_bad_requests_get_openai_error_bodies(plain):
    url, _ = plain
    for path, body, status, param in BAD:
        r = httpx.post(url + path, json=body, timeout=30)
        assert r.status_code == status, (body, r.text)
        err = r.json()
        assert is_error_body(err) and err["error"]["param"] == param, (body, err)
        assert err["error"]["type"] == "invalid_request_error" and "Traceback" not in r.text
    for raw in (b"{not json", b"", b"[1, 2]", b'"text"'):
        r = httpx.post(f"{url}/v1/completions", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400 and is_error_body(r.json()), raw
    r = httpx.get(f"{url}/v1/nothing-here")
    assert r.status_code == 404 and is_error_body(r.json())
    with pytest.raises(openai.NotFoundError):
        client(url).completions.create(model="nope", prompt="x")
    # still serving
    ok = client(url).chat.completions.create(model="plain", messages=[{"role": "user", "content": "x"}], max_tokens=3)
    assert len(ok.choices[0].token_ids) <= 3 and ok.choices[0].finish_reason in ("stop", "length")


def test_plain_engine_batches_and_isolates_a_failing_request(plain, tiny_tokenizer):
    url, engine = plain
    prompts = [[5, 6, 7], [8, 9], [13, 14], [10], [11, 12], [20], [21, 22], [23]]

    def call(p):
        body = {"model": "plain", "prompt": p, "max_tokens": 4, "temperature": 0, "ignore_eos": True}
        return httpx.post(f"{url}/v1/completions", json=body, timeout=30)

    before = engine.calls
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(call, prompts))
    assert replies[2].status_code == 400 and "token 13" in replies[2].json()["error"]["message"]
    alone = ScriptedEngine(len(tiny_tokenizer))
    for p, r in zip(prompts, replies):
        if p != [13, 14]:
            assert r.status_code == 200
            want = alone.generate([p], [SamplingParams(0.0, max_tokens=4)])[0]
            assert tuple(r.json()["choices"][0]["token_ids"]) == want.token_ids
    # sequentially this is 8 calls; batched: a few windows plus the one-by-one rerun of a failed batch
    assert engine.calls - before < 8 + 8
    first_window = engine.calls - before
    before = engine.calls
    with ThreadPoolExecutor(7) as pool:
        assert all(r.status_code == 200 for r in pool.map(call, [p for p in prompts if p != [13, 14]]))
    assert engine.calls - before <= 3, first_window


def test_text_stream_decodes_incrementally_and_cuts_at_stops(tiny_tokenizer):
    ids = tiny_tokenizer("a€b c", add_special_tokens=False)["input_ids"]
    assert len(ids) == 7  # "€" is three byte tokens here
    stream = TextStream(tiny_tokenizer, ("b x",))
    # the partial character waits for its last byte; "b" and "b " could begin the stop string
    assert [stream.feed([i], False) for i in ids] == ["a", "", "", "€", "", "", "b c"]
    stream = TextStream(tiny_tokenizer, ("nope", "b c"))
    assert "".join(stream.feed([i], False) for i in ids) == "a€" and stream.stopped and stream.text == "a€"
    # any chunking of any token sequence gives the whole decode, and stops cut it where it first occurs
    rng = random.Random(0)
    for _ in range(300):
        seq = [rng.randrange(len(tiny_tokenizer)) for _ in range(rng.randrange(1, 25))]
        skip = rng.random() < 0.5
        full = tiny_tokenizer.decode(seq, skip_special_tokens=skip)
        at = rng.randrange(len(full)) if full else 0
        stop = full[at : at + rng.randrange(1, 4)]
        for stops in ((), (stop,)) if stop and "\ufffd" not in stop else ((),):
            stream, out, i = TextStream(tiny_tokenizer, stops, skip), "", 0
            while i < len(seq) and not stream.stopped:
                k = rng.randrange(1, 4)
                out += stream.feed(seq[i : i + k], i + k >= len(seq))
                i += k
            assert out == stream.text == (full[: full.index(stop)] if stops else full)


def test_serve_runs_a_model_directory(tiny_model_dir):
    """`posttrain serve` in its own process, on the paged engine."""
    from posttrain.core.errors import ConfigError
    from posttrain.engine.server.app import serve

    with pytest.raises(ConfigError, match="engine 'nope' is not available"):
        serve(tiny_model_dir, engine="nope")
    with posttrain_serve("--model", tiny_model_dir, "--engine", "paged", "--model-name", "tiny") as url:
        r = client(url).completions.create(model="tiny", prompt="x", max_tokens=3, temperature=0)
        assert len(r.choices[0].token_ids) <= 3 and r.usage.prompt_tokens == 1


@contextmanager
def posttrain_serve(*args: str):
    """`posttrain serve ARGS --port P` in its own process; yields its URL once /health answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "posttrain.cli", "serve", *args, "--port", str(port)])
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not come up"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


def test_serve_modes_pick_the_engine_options(tiny_model_dir, monkeypatch):
    """--mode fast: int8 weight-only matmuls with n-gram drafts; standard: exact, no drafts."""
    import uvicorn

    from posttrain.core.errors import ConfigError
    from posttrain.engine.server import app as server
    built = []
    monkeypatch.setattr(server, "build_app", lambda eng, *a, **k: built.append(eng))
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    with pytest.raises(ConfigError, match="mode 'turbo' is not one of fast, standard"):
        server.serve(tiny_model_dir, mode="turbo")
    server.serve(tiny_model_dir, mode="standard")
    server.serve(tiny_model_dir, mode="fast")
    server.serve(tiny_model_dir, mode="fast", weights="int8")  # explicit options win over the mode's
    standard, fast, fast_int8 = built
    assert standard.weights == "exact" and standard.propose is None
    from posttrain.engine.paged import quant

    expected = "int8-weight-only" if quant.int8_kernel_error("int8-weight-only") is None else "exact"  # fallback
    assert fast.propose is not None and fast.weights == fast.weights_precision == expected
    assert fast_int8.weights == ("int8" if quant.int8_kernel_error() is None else "exact")
    assert fast_int8.propose is not None
