"""Safe defaults on one machine: a DDP/FSDP2 job's rendezvous and gloo sockets listen on loopback only."""

from __future__ import annotations

from dist_cases import listening, listening_sockets

from posttrain.train.distributed.group import launch

LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1 as /proc/net/tcp* spells them


def test_a_two_rank_job_listens_on_loopback_only():
    before = listening()
    during = launch(listening_sockets, 2)
    new = set(during[0]) - before
    wide = sorted(a for a in new if a.split(":")[0] not in LOOPBACK)
    assert not wide, f"the job listens beyond loopback: {wide}"
