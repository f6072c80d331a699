"""Pure parts of the fleet: Slurm's text, filename patterns, NCCL lines, per-node configs."""

from __future__ import annotations

import pytest

from console.config import ConfigError, parse_config
from console.fleet.fleet import node_config, node_host, node_logs
from console.observe.nccl import nccl_fact, nccl_lines
from console.fleet.slurm_text import SlurmError, parse_duration, parse_fields, parse_job, parse_submitted, expand_filename

#: `scontrol show job -o` of a two-node job (22.05), shortened to the fields Pulse reads and a few it skips.
SCONTROL = (
    "JobId=4242 JobName=llama run UserId=alice(1000) GroupId=alice(1000) JobState=RUNNING Reason=None "
    "Requeue=1 Restarts=2 BatchFlag=1 ExitCode=0:0 RunTime=1-02:03:04 NodeList=gpu[01-02] BatchHost=gpu01 "
    "NumNodes=2 NumCPUs=32 NumTasks=16 TRES=cpu=32,mem=64G,node=2 Command=/home/alice/train.sbatch --big "
    "WorkDir=/home/alice StdErr=/scratch/%x-%j-%N.err StdOut=/scratch/%x-%j-%N.out"
)


def test_job_fields_with_spaces_and_equals_in_values() -> None:
    """Values run to the next ` Key=`: a job name with a space, TRES with `=` inside, a command with args."""
    job = parse_job(SCONTROL)
    assert (job.job_id, job.name, job.user, job.state, job.nodes) == ("4242", "llama run", "alice", "RUNNING", "gpu[01-02]")
    assert (job.num_nodes, job.num_tasks, job.restarts, job.batch, job.requeue) == (2, 16, 2, True, True)
    assert job.elapsed_s == 93784.0
    assert job.command == "/home/alice/train.sbatch --big" and job.work_dir == "/home/alice"
    assert job.reason == "" and job.stdout == "/scratch/%x-%j-%N.out"
    assert parse_fields("TRES=cpu=32,mem=64G Next=1") == {"TRES": "cpu=32,mem=64G", "Next": "1"}


def test_durations() -> None:
    assert parse_duration("05:06") == 306
    assert parse_duration("1:02:03") == 3723
    assert parse_duration("2-00:00:01") == 172801
    with pytest.raises(ValueError):
        parse_duration("UNLIMITED")


def test_no_job_and_sbatch_output() -> None:
    with pytest.raises(SlurmError, match="printed no job"):
        parse_job("slurm_load_jobs error: Invalid job id specified\n")
    assert parse_submitted("Submitted to the queue\n5123;cluster\n") == "5123"
    with pytest.raises(SlurmError, match="no job ID"):
        parse_submitted("sbatch: error: Batch job submission failed")


def test_filename_patterns_per_node_and_rank() -> None:
    """%x %j %N %n, zero padding, %% — and %t without a rank is any rank's file (a glob)."""
    job = parse_job(SCONTROL)
    assert expand_filename(job.stdout, job, node="gpu02", node_index=1) == "/scratch/llama run-4242-gpu02.out"
    assert expand_filename("/l/%j.%4t.%n.log", job, node="gpu02", node_index=1, task=3) == "/l/4242.0003.1.log"
    assert expand_filename("/l/%j-rank%t.log", job, node="gpu02") == "/l/4242-rank*.log"
    assert expand_filename("/l/100%%-%u", job, node="n") == "/l/100%-alice"


def test_node_configs_follow_the_job() -> None:
    """Each node's host is its name (with the login host's user); the batch output is followed on the batch host only."""
    config = parse_config('[target]\nhost = "bob@login"\nslurm_job = 4242\n[run]\nmatch = "train"\n')
    job = parse_job(SCONTROL)
    assert node_logs(config, job, ["gpu01", "gpu02"]) == [job.stdout, None]
    first = node_config(config, "gpu01", 0, job, log=job.stdout)
    assert first.target.host == "bob@gpu01" and first.target.slurm_job is None
    assert first.run.log == "/scratch/llama run-4242-gpu01.out"
    per_rank = parse_config('[target]\nslurm_job = 4242\n[run]\nlog = "/l/%N-%t.log"\n')
    assert node_logs(per_rank, job, ["gpu01", "gpu02"]) == ["/l/%N-%t.log"] * 2
    assert node_config(per_rank, "gpu02", 1, job, log="/l/%N-%t.log").run.log == "/l/gpu02-*.log"
    assert node_host("gpu03", None) == "gpu03" and node_host("carol@gpu03", "bob@login") == "carol@gpu03"


def test_fleet_config_keys_and_their_errors() -> None:
    config = parse_config('[target]\nhosts = ["n1", "n2"]\n')
    assert config.target.hosts == ("n1", "n2") and config.target.reach == "ssh"
    with pytest.raises(ConfigError) as bad:
        parse_config('[target]\nslurm_job = "12a"\nreach = "telepathy"\nhosts = []\n')
    assert [p.split(": ", 2)[1] for p in bad.value.problems] == ["target.hosts", "target.reach", "target.slurm_job"]


WATCHDOG = (
    "[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4512, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600046 "
    "milliseconds before timing out."
)


def test_nccl_watchdog_and_flight_recorder_lines() -> None:
    """The collective, its sequence number and rank; a rank behind the others is named."""
    fact = nccl_fact("gpu01", WATCHDOG)
    assert fact is not None
    assert (fact.rank, fact.op, fact.seq, fact.timeout_ms, fact.flight_recorder) == (3, "ALLREDUCE", 4512, 600000, False)
    behind = nccl_fact("gpu02", WATCHDOG.replace("3]", "9]").replace("4512", "4511"))
    recorder = nccl_fact("gpu01", "[rank3]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 3] Dumping flight recorder to /tmp/nccl_trace_rank_3")
    assert recorder is not None and recorder.flight_recorder and recorder.rank == 3
    assert nccl_fact("gpu01", "step 10 loss 2.0") is None
    assert nccl_lines([fact, behind, recorder]) == [
        "NCCL watchdog timed out in ALLREDUCE #4512 after 600 s on 2 node(s)",
        "rank 9 is behind at collective #4511 (others reached #4512)",
        "NCCL flight recorder dumped (see the nodes' logs)",
    ]


def test_a_rank_on_another_node_outside_the_collective_makes_its_node_hung():
    """torchrun_hang's two ranks (a real capture) as if each ran on its own node: alone, neither node can tell a
    spin from work (unknown); across nodes, the shared grouping names rank 1 the straggler and its node hung."""
    from console.diagnose import diagnose
    from console.fleet.fleet_diagnose import FleetDiagnosis, NodeReport, RankStack, group_ranks, name_straggler_nodes
    from tests.real_captures import Capture

    capture = Capture("torchrun_hang")
    _, last = capture.samples()
    evidence = capture.evidence(stacks=False)
    alone = diagnose(evidence, capture.config)
    assert alone.name == "unknown"
    nodes = [NodeReport(name, name, evidence, alone) for name in ("gpu01", "gpu02")]
    ranks = [
        RankStack(f"gpu0{p.rank + 1}", p.pid, dump=capture.dump(p.pid), rank=p.rank, local_rank=0)
        for p in sorted((p for p in last.processes if p.role == "rank"), key=lambda p: p.rank)
    ]
    diagnosis = FleetDiagnosis(nodes, ranks=ranks, groups=group_ranks(ranks))
    name_straggler_nodes(diagnosis)
    assert [n.verdict.name for n in nodes] == ["unknown", "hung"]
    assert nodes[1].verdict.summary.startswith(
        "rank 1 (gpu02, local 0) is the straggler: rank 0 (gpu01, local 0) waits in a CUDA synchronize"
    ), nodes[1].verdict.summary
    assert "rank 1 (gpu02, local 0) stopped" in nodes[1].verdict.summary
