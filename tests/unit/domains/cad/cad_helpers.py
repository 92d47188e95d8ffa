"""Shared helpers of the cad env tests: tasks by level, hand-driven episodes, STL bytes of a solid."""

from __future__ import annotations

import asyncio

import trimesh

from posttrain.envs.env import Action, Resources, ToolCall
from posttrain.domains.cad.env import CadEnv
from posttrain.tasks.registry import make_source_tasks


def task(level: int, seed: int = 0, **options):
    return make_source_tasks("cad", 1, seed, {"level": level, **options})[0]


def act(*pairs) -> Action:
    """One turn of calls: act(("render", {}), ("confirm_step", {"step": 1}))."""
    c = tuple(ToolCall(name, dict(args), f"call_{i}") for i, (name, args) in enumerate(pairs))
    return Action(text="", tool_calls=c, parsed=c)


def episode(t, *actions: Action, isolation=None):
    """(the StepResults of the actions run in order, the final state) of one fresh env."""
    async def go():
        env = CadEnv(Resources(), isolation=isolation)
        await env.reset(t)
        steps = [await env.step(a) for a in actions]
        state = env.state()
        await env.close()
        return steps, state

    return asyncio.run(go())


def stl_of(*meshes: trimesh.Trimesh) -> bytes:
    return trimesh.util.concatenate(list(meshes)).export(file_type="stl")


def solid_stl(solid) -> bytes:
    """STL bytes of a manifold3d solid."""
    mesh = solid.to_mesh()
    return stl_of(trimesh.Trimesh(mesh.vert_properties[:, :3], mesh.tri_verts, process=False))
