"""schedule/kube_jobs.py without an API server: when a node's scheduled Job is made, kept or replaced, and the Job
made from a DaemonSet's pod (against the real API: tests/kubernetes/test_schedule_on_kubernetes.py)."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml

from gpucheck.schedule import kube_jobs
from support import ROOT

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
DAY = 86400
LIVE = "waiting or running (a user pod preempts it)"


def ended(condition: str, at: dt.datetime) -> dict:
    return {"status": {"conditions": [{"type": "Suspended", "status": "True"},
                                      {"type": condition, "status": "True",
                                       "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ")}]}}


@pytest.mark.parametrize(("job", "verb", "said"), [
    (None, "create", "none yet"),
    ({"status": {"active": 1}}, "keep", LIVE),
    # a condition that is not True is no end
    ({"status": {"conditions": [{"type": "Complete", "status": "False"}]}}, "keep", LIVE),
    (ended("Complete", NOW - dt.timedelta(hours=23)), "keep",
     "the last one completed 2026-11-30 13:00:00Z; the next is due 2026-12-01 13:00:00Z"),
    (ended("Complete", NOW - dt.timedelta(hours=24)), "replace", "the last one completed 2026-11-30 12:00:00Z"),
    (ended("Failed", NOW - dt.timedelta(days=3)), "replace", "the last one failed 2026-11-28 12:00:00Z"),
])
def test_a_job_is_made_kept_while_it_lives_and_until_due_then_replaced(job, verb, said):
    assert kube_jobs.decide(job, DAY, NOW) == kube_jobs.Decision(verb, said)


def test_the_job_is_the_daemonsets_check_container_alone_holding_the_gpus():
    daemonset = next(d for d in yaml.safe_load_all((ROOT / "deploy/kubernetes/30-daemonset.yaml").read_text()))
    made = kube_jobs.job_manifest(daemonset["spec"]["template"], "weekly", "gpu-7", ["--full"], 4, "gpucheck")
    assert made["metadata"]["name"] == "gpucheck-weekly-gpu-7" and made["metadata"]["namespace"] == "gpucheck"
    pod = made["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "gpucheck" and "args" not in container
    assert container["command"] == ["gpucheck", "node", "--kubernetes", "--scheduled", "weekly", "--full"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    names = [e["name"] for e in container["env"]]
    assert names[:3] == ["NODE_NAME", "POD_NAME", "POD_NAMESPACE"] and "INTERVAL_S" not in names
    assert "SCHEDULE" not in names and names.count("NODE_NAME") == 1
    assert "nodeSelector" not in pod and pod["restartPolicy"] == "Never"
    # the DaemonSet's own template is left as it was
    assert [c["name"] for c in daemonset["spec"]["template"]["spec"]["containers"]] == ["gpucheck", "watch"]


@pytest.mark.parametrize(("allocatable", "gpus"), [({"nvidia.com/gpu": "8"}, 8), ({}, 0),
                                                    ({"nvidia.com/gpu": "x"}, 0), (None, 0)])
def test_the_gpus_are_what_the_node_offers(allocatable, gpus):
    assert kube_jobs.gpus_of({"status": {"allocatable": allocatable}}) == gpus
