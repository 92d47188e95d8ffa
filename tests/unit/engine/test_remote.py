"""RemoteEngine against our own server on 127.0.0.1 (uvicorn in a thread, HF engine behind it):
greedy and seeded completions equal a local HFEngine's, logprobs within 1e-4; the three ways of
reading token ids back (token_ids, "token_id:N" logprob tokens, re-tokenised text); retries while
the server is not up yet; server errors; weight updates through /update_weights_from_disk."""

from __future__ import annotations

import copy
import math
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import torch

from posttrain.engine import Engine, HFEngine, SamplingParams
from posttrain.engine.remote import RemoteEngine, RemoteEngineError, completion_request, make_engine, parse_choice
from posttrain.engine.server.app import build_app

PROMPTS = ["Calculate 1 + 2.", "We add 12 and", "x", "Calculate 345 + 678 and then", "Answer:", "7"]


@contextmanager
def running(app, sock: socket.socket | None = None, delay_s: float = 0.0):
    """Serve `app` with uvicorn on 127.0.0.1 in a thread (after `delay_s`); yields the base URL."""
    import uvicorn

    if sock is None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))

    def run():
        time.sleep(delay_s)
        server.run(sockets=[sock])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30 + delay_s
    while delay_s == 0 and not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        while thread.is_alive() and not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer(t, add_special_tokens=False)["input_ids"] for t in PROMPTS]


@pytest.fixture(scope="module")
def served(sharp_model, tiny_tokenizer):
    engine = HFEngine(copy.deepcopy(sharp_model), pad_token_id=0, tokenizer=tiny_tokenizer)
    forwards = [0]
    engine.model.register_forward_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    with running(build_app(engine, tiny_tokenizer, "tiny", batch_window_s=0.05)) as url:
        yield url, forwards


@pytest.fixture(scope="module")
def reference(sharp_model, tiny_tokenizer):
    return HFEngine(copy.deepcopy(sharp_model), pad_token_id=0, tokenizer=tiny_tokenizer)


def worst_logprob_gap(a, b) -> float:
    return max(abs(x - y) for ca, cb in zip(a, b) for x, y in zip(ca.logprobs, cb.logprobs))


def test_remote_equals_local_engine(served, reference, prompts, tiny_tokenizer):
    url, forwards = served
    remote = make_engine(url + "/v1", tiny_tokenizer)  # the model name from GET /v1/models
    assert isinstance(remote, Engine) and remote.model == "tiny"
    eos = (tiny_tokenizer.eos_token_id,)
    first = reference.generate(prompts, [SamplingParams(0.0, max_tokens=12)] * len(prompts))
    stop_id = first[0].token_ids[4]  # ends prompt 0 at its 5th token (and maybe others)
    greedy = [SamplingParams(0.0, max_tokens=12, stop_token_ids=(stop_id, *eos))] * len(prompts)
    sampled = [SamplingParams(1.0, max_tokens=m, seed=s, top_k=k, top_p=tp, min_p=mp)
               for m, s, k, tp, mp in ((10, 1, 0, 1.0, 0.0), (8, 2, 5, 1.0, 0.0), (9, 3, 0, 0.7, 0.0),
                                       (7, 4, 0, 1.0, 0.05), (6, 5, 0, 1.0, 0.0), (12, 6, 3, 0.9, 0.0))]
    for params in (greedy, sampled):
        before = forwards[0]
        got = remote.generate(prompts, params)
        used = forwards[0] - before
        want = reference.generate(prompts, params)
        assert [c.token_ids for c in got] == [c.token_ids for c in want]
        assert [c.finish_reason for c in got] == [c.finish_reason for c in want]
        assert worst_logprob_gap(got, want) <= 1e-4
        assert remote.last_paths == ["token_ids"] * len(prompts)
        assert used < sum(len(c.token_ids) for c in want)  # concurrent requests shared forward passes
    assert got[0].token_ids != got[1].token_ids and greedy[0] != sampled[0]
    assert [c.finish_reason for c in reference.generate(prompts, greedy)][0] == "stop"
    # a stop string: the token that completes it is the last one, as the local engine reports
    text = tiny_tokenizer.decode(first[3].token_ids)
    stop = text[4:7]
    params = [SamplingParams(0.0, max_tokens=12, stop=(stop,))]
    got, want = remote.generate(prompts[3:4], params), reference.generate(prompts[3:4], params)
    assert got[0].token_ids == want[0].token_ids and worst_logprob_gap(got, want) <= 1e-4
    assert got[0].finish_reason == "stop" and len(got[0].token_ids) < 12
    # unseeded requests draw seeds from the global torch RNG, as HFEngine does
    torch.manual_seed(0)
    a = remote.generate(prompts[:2], [SamplingParams(max_tokens=6)] * 2)
    torch.manual_seed(0)
    assert [c.token_ids for c in remote.generate(prompts[:2], [SamplingParams(max_tokens=6)] * 2)] == \
        [c.token_ids for c in a]
    remote.close()


def test_token_ids_read_back_three_ways(served, reference, prompts, tiny_tokenizer):
    url, _ = served
    params = SamplingParams(0.0, max_tokens=8)
    want = reference.generate(prompts[:1], [params])[0]
    body = completion_request("tiny", prompts[0], params, seed=0)
    choice = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0]
    del choice["token_ids"]  # as vLLM without return_token_ids: "token_id:N" logprob tokens
    got, how = parse_choice(choice)
    assert how == "logprob_tokens" and got.token_ids == want.token_ids
    assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) <= 1e-4
    # a server with neither: the text is re-tokenised; logprobs kept only where the pieces agree
    plain = httpx.post(f"{url}/v1/completions", json={**body, "return_tokens_as_token_ids": False},
                       timeout=60).json()["choices"][0]
    del plain["token_ids"]
    got, how = parse_choice(plain, tiny_tokenizer)
    assert how == "retokenized" and tiny_tokenizer.decode(got.token_ids) == tiny_tokenizer.decode(want.token_ids)
    if got.token_ids == want.token_ids:
        assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) <= 1e-4
    else:
        assert all(math.isnan(x) for x in got.logprobs)
    # by hand: no logprobs at all -> NaN; a trimmed stop string is put back; no tokenizer -> error
    ids = tiny_tokenizer("We add 12", add_special_tokens=False)["input_ids"]
    c, how = parse_choice({"text": "We add", "finish_reason": "stop", "stop_reason": " 12"}, tiny_tokenizer)
    assert how == "retokenized" and list(c.token_ids) == ids and all(math.isnan(x) for x in c.logprobs)
    c, _ = parse_choice({"text": "We", "finish_reason": "stop", "stop_reason": 2}, tiny_tokenizer)
    assert c.token_ids[-1] == 2 and c.finish_reason == "stop"
    c, how = parse_choice({"token_ids": [5, 6], "finish_reason": "length", "logprobs": None})
    assert how == "token_ids" and c.token_ids == (5, 6) and all(math.isnan(x) for x in c.logprobs)
    with pytest.raises(RemoteEngineError, match="no tokenizer"):
        parse_choice({"text": "x", "finish_reason": "length"})
    with pytest.raises(RemoteEngineError, match="abort"):
        parse_choice({"token_ids": [5], "finish_reason": "abort"})


def test_request_body_carries_the_contract():
    p = SamplingParams(0.7, top_p=0.9, top_k=5, min_p=0.1, max_tokens=9, stop_token_ids=(2, 7), stop=("\n\n",))
    body = completion_request("m", (4, 5), p, seed=3)
    assert body["prompt"] == [4, 5] and body["seed"] == 3 and body["max_tokens"] == 9
    assert body["ignore_eos"] is True and body["stop_token_ids"] == [2, 7] and body["stop"] == ["\n\n"]
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"]) == (0.7, 0.9, 5, 0.1)
    plain = completion_request("m", (4,), SamplingParams(), seed=1)
    assert "top_k" not in plain and "min_p" not in plain and "stop" not in plain


def test_retries_until_the_server_is_up_and_reports_errors(sharp_model, tiny_tokenizer, prompts, reference):
    engine = HFEngine(copy.deepcopy(sharp_model), pad_token_id=0, tokenizer=tiny_tokenizer)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused until uvicorn starts
    with running(build_app(engine, tiny_tokenizer, "tiny"), sock=sock, delay_s=0.6) as url:
        remote = RemoteEngine(url, "tiny", tokenizer=tiny_tokenizer, max_retries=8, backoff_s=0.1)
        start = time.monotonic()
        params = [SamplingParams(0.0, max_tokens=5)] * 2
        got = remote.generate(prompts[:2], params)
        assert time.monotonic() - start >= 0.3  # it had to wait
        assert [c.token_ids for c in got] == [c.token_ids for c in reference.generate(prompts[:2], params)]
        with pytest.raises(RemoteEngineError, match="HTTP 400.*maximum context length"):
            remote.generate([[5] * 1020], [SamplingParams(0.0, max_tokens=10)])
        with pytest.raises(RemoteEngineError, match="HTTP 404.*does not exist"):
            RemoteEngine(url, "other").generate(prompts[:1], [SamplingParams(max_tokens=2)])
        with pytest.raises(NotImplementedError, match="weights_dir"):
            remote.update_weights({}, 1)
        remote.close()
    dead = RemoteEngine(url, "tiny", max_retries=2, backoff_s=0.01)
    with pytest.raises(RemoteEngineError, match="after 3 tries"):
        dead.generate(prompts[:1], [SamplingParams(max_tokens=2)])


def test_update_weights_through_the_server(tiny_model_dir, sharp_model, tiny_tokenizer, prompts, tmp_path):
    from posttrain.core.hf import load_model

    plain_model = load_model(tiny_model_dir, "float32", torch.device("cpu"))
    engine = HFEngine(copy.deepcopy(sharp_model), pad_token_id=0, tokenizer=tiny_tokenizer)
    params = [SamplingParams(0.0, max_tokens=8)] * len(prompts)
    want_plain = HFEngine(copy.deepcopy(plain_model), pad_token_id=0).generate(prompts, params)
    with running(build_app(engine, tiny_tokenizer, "tiny", enable_weight_updates=True)) as url:
        remote = RemoteEngine(url, "tiny", tokenizer=tiny_tokenizer, weights_dir=tmp_path / "w")
        sharp = remote.generate(prompts, params)
        assert [c.token_ids for c in sharp] != [c.token_ids for c in want_plain]
        remote.update_weights(plain_model.state_dict(), version=3)
        assert remote.version == 3 and engine.version == 3
        got = remote.generate(prompts, params)
        assert [c.token_ids for c in got] == [c.token_ids for c in want_plain]
        assert worst_logprob_gap(got, want_plain) <= 1e-4
        with pytest.raises(RemoteEngineError, match="HTTP 400.*missing"):
            remote.update_weights({"model.norm.weight": torch.ones(64)}, version=4)
        assert engine.version == 3
    with running(build_app(HFEngine(copy.deepcopy(sharp_model), pad_token_id=0), tiny_tokenizer, "tiny")) as url:
        off = RemoteEngine(url, "tiny", weights_dir=tmp_path / "w2")
        with pytest.raises(NotImplementedError, match="does not take weight updates"):
            off.update_weights(plain_model.state_dict(), version=1)
