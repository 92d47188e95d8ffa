"""Runs BFCL's multi-turn API classes inside the sandbox: replay calls, report results and state differences.

    python3 bfcl_runner.py [job.json]      # batch: in the sandbox's work dir, next to the class source files
    python3 bfcl_runner.py --serve         # an episode's long-lived runner: JSON lines on stdin / stdout

This file is a standalone script (the sandbox's system Python, stdlib only). Batch: domains/bfcl/env.py
sends it, BFCL's class sources and job.json in a RunRequest, and reads the one JSON line it prints
last (scoring). Serve (domains/bfcl/session.py, one process per episode): the first stdin line is the
job without "runs" / "compare"; the runner builds the instances once and answers {"ready": true};
then each line {"calls": [call, ...]} runs those calls on the same instances and is answered
{"results": [outcome, ...]} in order, and {"state": true} is answered {"state": snapshot} (below).
A MemoryError outside a method (showing a huge result) is answered {"limit": "memory"}, anything
else that breaks the runner {"fatal": "..."}, then it exits; EOF on stdin ends it. Only the runner
writes to the protocol pipe: fds 0-2 point at /dev/null while classes run, so a stray print or
os.write from a class cannot corrupt a line.

job.json: {"classes": [class name, ...], "modules": {class: module file stem}, "stateless": [...],
"config": initial_config, "long_context": false, "runs": {run name: [per user turn: [call, ...]]},
"compare": [run a, run b] or null}. A call is {"name", "arguments": {...}} (a model's) and may hold
"args": [...] (positional, from BFCL's ground-truth strings). Each run gets fresh instances (BFCL's
`_load_scenario` with a deep copy of the config), its calls executed turn by turn as BFCL does: a
method of the involved classes by name (a later class wins a shared name), its result as BFCL shows
it (str as is, dict as JSON, anything else str()); an unknown name, arguments the signature does not
take, or an exception inside the method is an error result "Error during execution: ..." with its
kind (unknown_tool, bad_arguments, tool_failed) and the run goes on.

Output line: {"runs": {name: [per turn: [{"ok", "kind", "result"}, ...]]}, "differences": [per turn:
{class: {attr: {"a": repr, "b": repr}}}]} when "compare" names two runs: after each user turn, every
public attribute (no leading "_") of each instance of run b compared with run a's by `!=`, the rule
of BFCL's state checker (so the classes' own __eq__ decide, e.g. a Directory by name and contents).
With "snapshot": true it also holds "states": {name: snapshot after the last turn}; a snapshot is
{class: {attr: repr}} of every public attribute (the classes' reprs show names and contents, no
addresses), what tests compare across processes. The calls are data (names and JSON arguments), never code: nothing here evaluates text.
"""

import contextlib
import copy
import importlib
import inspect
import io
import json
import os
import sys

MAX_REPR = 300


def _instances(job):
    instances = {}
    for name in job["classes"]:
        cls = getattr(importlib.import_module(job["modules"][name]), name)
        instance = cls()
        if name not in job["stateless"]:
            instance._load_scenario(copy.deepcopy(job["config"].get(name, {})), long_context=job["long_context"])
        instances[name] = instance
    methods = {}
    for instance in instances.values():
        for method_name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
            if not method_name.startswith("_"):
                methods[method_name] = method
    return instances, methods


def _shown(value):
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _execute(methods, call):
    name = call.get("name")
    args, kwargs = call.get("args") or [], call.get("arguments") or {}
    method = methods.get(name) if isinstance(name, str) else None
    if method is None:
        return {"ok": False, "kind": "unknown_tool", "result": f"Error during execution: name {name!r} is not defined"}
    if not isinstance(kwargs, dict) or not isinstance(args, list):
        return {"ok": False, "kind": "bad_arguments", "result": "Error during execution: arguments must be an object"}
    try:
        inspect.signature(method).bind(*args, **kwargs)
    except TypeError as e:
        return {"ok": False, "kind": "bad_arguments", "result": f"Error during execution: {name}() {e}"}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            value = method(*args, **kwargs)
    except Exception as e:  # a failure inside BFCL's method: the model sees it, the run goes on
        return {"ok": False, "kind": "tool_failed", "result": f"Error during execution: {e}"}
    return {"ok": True, "kind": "", "result": _shown(value)}


def _differences(a, b):
    out = {}
    for cls, right in b.items():
        left = a[cls]
        for attr in vars(right):
            if attr.startswith("_"):
                continue
            if getattr(left, attr, None) != getattr(right, attr):
                out.setdefault(cls, {})[attr] = {"a": repr(getattr(left, attr, None))[:MAX_REPR],
                                                 "b": repr(getattr(right, attr))[:MAX_REPR]}
    return out


def _snapshot(instances):
    return {cls: {attr: repr(value) for attr, value in vars(instance).items() if not attr.startswith("_")}
            for cls, instance in instances.items()}


def main(path):
    with open(path, encoding="utf-8") as f:
        job = json.load(f)
    runs = job["runs"]
    with contextlib.redirect_stdout(io.StringIO()):
        built = {name: _instances(job) for name in runs}
    results = {name: [] for name in runs}
    differences = []
    turns = max((len(t) for t in runs.values()), default=0)
    for turn in range(turns):
        for name, calls in runs.items():
            methods = built[name][1]
            results[name].append([_execute(methods, c) for c in (calls[turn] if turn < len(calls) else [])])
        if job.get("compare"):
            a, b = job["compare"]
            differences.append(_differences(built[a][0], built[b][0]))
    report = {"runs": results, "differences": differences}
    if job.get("snapshot"):
        report["states"] = {name: _snapshot(built[name][0]) for name in runs}
    print(json.dumps(report))


def serve():
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    def reply(message):
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            instances, methods = _instances(json.loads(requests.readline()))
        reply({"ready": True})
        for line in requests:
            request = json.loads(line)
            if request.get("state"):
                reply({"state": _snapshot(instances)})
            else:
                reply({"results": [_execute(methods, c) for c in request["calls"]]})
    except MemoryError:
        reply({"limit": "memory"})
        sys.exit(1)
    except Exception as e:  # the runner itself broke: the host restarts it by replay, or gives up
        reply({"fatal": f"{type(e).__name__}: {e}"[:MAX_REPR]})
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "job.json")
