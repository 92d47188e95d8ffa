"""Record real SmolLM2-135M-Instruct tool-call completions: the fixture the hermes parser is tested on.

    PYTHONPATH=. .venv/bin/python scripts/record_parser_outputs.py \
        [--model .cache/posttrain/models/smollm2-135m-instruct] [--out tests/unit/envs/data/smollm2_tool_calls.json]

What it does. A few BFCL-like cases (function schemas and a question, written out below so the
script needs no BFCL data) are put to the model through its chat template, with the tools shown in
two ways: "posttrain", the system prompt our episodes show a template that ignores `tools=`
(envs/tools/prompt.py `with_tools`, calls written by the hermes `format_calls`: one object per
`<tool_call>`), and "smollm2", a system prompt in the style SmolLM2 was trained on for function
calling, which asks for one `<tool_call>` holding a JSON array of calls. Unprompted, the 135M model
answered every case in prose (no call) when this was recorded, so the "+prefill" styles start the
assistant turn with `<tool_call>` and the model writes the rest; the recorded completion is the
tag plus the model's continuation, the turn the parser would see. Each prompt is decoded
greedily and sampled at temperature 0.7 with seeds 0 and 1 (transformers `generate`, CPU, fp32),
up to MAX_NEW_TOKENS new tokens, decoded with special tokens kept (as the engine hands turns to
the parser). The parser for the model is the one `pick_parser` picks from its chat template.

The fixture. {"model", "parser", "records": [{"id", "case", "style", "temperature", "seed",
"completion", "expected"}]}. "expected" is written by hand after reading the completion:
{"calls": [[name, arguments], ...], "errors": number of malformed calls, "form": "array" |
"object" | "none"} (the form the model wrote its calls in). A rerun keeps the expectation of a
record whose completion is unchanged and sets it to null otherwise: the test
(tests/unit/envs/test_smollm2_tool_calls.py) fails on a null expectation, so a changed output is
read and checked again before the fixture is committed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from posttrain.envs.tools import pick_parser, with_tools  # noqa: E402

MAX_NEW_TOKENS = 96
PREFILL = "<tool_call>"  # the assistant turn starts with the tag; the model writes the rest
DECODINGS = [(0.0, None), (0.7, 0), (0.7, 1)]  # (temperature, seed); 0.0 is greedy


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


CASES = {
    "triangle": ("Find the area of a triangle with a base of 10 units and height of 5 units.", [
        _tool("calculate_triangle_area", "Calculate the area of a triangle given its base and height.",
              {"base": {"type": "integer", "description": "The base of the triangle."},
               "height": {"type": "integer", "description": "The height of the triangle."}}, ["base", "height"])]),
    "spotify": ("Play songs from the artists Taylor Swift and Maroon 5, with a play time of 20 minutes and "
                "15 minutes respectively, on Spotify.", [
        _tool("spotify_play", "Play specific tracks from a given artist for a specific time duration.",
              {"artist": {"type": "string", "description": "The artist whose songs you want to play."},
               "duration": {"type": "integer", "description": "The duration in minutes."}}, ["artist", "duration"])]),
    "weather_time": ("What is the weather in Paris right now, and what time is it in Tokyo?", [
        _tool("get_weather", "Get the current weather in a city.",
              {"city": {"type": "string", "description": "The city name."}}, ["city"]),
        _tool("get_time", "Get the current local time in a city.",
              {"city": {"type": "string", "description": "The city name."}}, ["city"])]),
}


def smollm2_system(tools: list[dict]) -> str:
    """A system prompt in the style of SmolLM2's function-calling training data (array form)."""
    listed = json.dumps([t["function"] for t in tools], ensure_ascii=False)
    return (
        "You are an expert in composing functions. You are given a question and a set of possible functions. "
        "Based on the question, make one or more function calls to achieve the purpose. If none of the "
        "functions can be used, say so.\n\n"
        f"You have access to the following tools:\n<tools>{listed}</tools>\n\n"
        "The output MUST strictly follow this format, with no other text:\n"
        '<tool_call>[\n{"name": "func_name1", "arguments": {"argument1": "value1", "argument2": "value2"}},\n'
        "... (more tool calls as required)\n]</tool_call>\n"
        "If no function call is needed, make the tool calls an empty list '[]'."
    )


def prompts(tokenizer, parser) -> list[tuple[str, str, str]]:
    """[(case, style, prompt text)]; a "+prefill" style's prompt ends with PREFILL."""
    out = []
    for case, (question, tools) in CASES.items():
        messages, kwargs = with_tools([{"role": "user", "content": question}], tools, parser, tokenizer)
        ours = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
        own = [{"role": "system", "content": smollm2_system(tools)}, {"role": "user", "content": question}]
        theirs = tokenizer.apply_chat_template(own, tokenize=False, add_generation_prompt=True)
        out += [(case, "posttrain", ours), (case, "posttrain+prefill", ours + PREFILL),
                (case, "smollm2+prefill", theirs + PREFILL)]
    return out


def generate(model, tokenizer, text: str, temperature: float, seed: int | None) -> str:
    import torch

    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    sample = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if seed is not None else {
        "do_sample": False}
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=MAX_NEW_TOKENS, pad_token_id=tokenizer.eos_token_id, **sample)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=False)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(REPO / ".cache/posttrain/models/smollm2-135m-instruct"))
    ap.add_argument("--out", default=str(REPO / "tests/unit/envs/data/smollm2_tool_calls.json"))
    args = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)  # a 135M model gains little from threads; on a loaded machine they cost
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    parser = pick_parser(tokenizer)
    out = Path(args.out)
    old = {r["id"]: r for r in json.loads(out.read_text())["records"]} if out.is_file() else {}
    records, changed = [], 0
    for case, style, text in prompts(tokenizer, parser):
        for temperature, seed in DECODINGS:
            rid = f"{case}/{style}/" + ("greedy" if seed is None else f"t{temperature}-seed{seed}")
            completion = (PREFILL if style.endswith("+prefill") else "") + generate(
                model, tokenizer, text, temperature, seed)
            kept = old.get(rid, {})
            expected = kept.get("expected") if kept.get("completion") == completion else None
            changed += expected is None
            records.append({"id": rid, "case": case, "style": style, "temperature": temperature, "seed": seed,
                            "completion": completion, "expected": expected})
            print(f"{rid}: {completion!r}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"model": "SmolLM2-135M-Instruct", "parser": parser.name, "records": records}
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(records)} records to {out}; {changed} need a hand-checked expectation")


if __name__ == "__main__":
    main()
