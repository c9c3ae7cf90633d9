"""--launcher kubernetes: every node's checks as a pod bound to its Node, made from the site's pod template
(cluster/pods.py); the MPI, all-reduce, smoke and training stages' jobs (those mpirun starts) as a launcher pod and
worker pods made from its job template (cluster/mpi_pods.py), their stacks those of the job template's image
(job_image.py: probed once by a pod); through the API with --kubeconfig's credentials (in a pod: its service
account). The network and burn stages, and the jobs torchrun or one process per task start, are not run through
Kubernetes yet: a run leaves them out, saying so, and a run that names one is refused before anything starts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ...kubernetes import api
from ...model import VERDICT_OF_EXIT, Status
from ...workloads import launch
from .. import handoff, job_image, jobs, mpi_pods, pods
from ..context import ClusterContext, NodeOutcome, Options
from ..frameworks import FRAMEWORKS
from ..layout import Layout
from ..nodes import address
from ..ssh.client import RemoteHosts
from ..ssh.result import Remote
from .base import Burns, Launcher, LauncherError

NOT_YET = "not run through Kubernetes yet (docs/kubernetes.md)"
EXIT_OF_VERDICT = {verdict: code for code, verdict in VERDICT_OF_EXIT.items()}


class KubernetesLauncher(Launcher):
    through = "through Kubernetes"
    not_across = frozenset({"network", "burn"})
    drains_in = "kubernetes"

    def cannot_run(self, stage: str, options: Options) -> str:
        if stage in self.not_across:
            return super().cannot_run(stage, options)
        if not options.job_template:
            return "no --job-template"
        framework = FRAMEWORKS.get(options.framework)
        if stage == "training" and framework:
            framework = FRAMEWORKS.get(framework.benchmark)
        if stage in ("smoke", "training") and framework and framework.start != "mpirun":
            return f"--framework {options.framework}'s ranks start with {framework.start}: {NOT_YET}"
        return ""

    def read_nodes(self, options: Options) -> dict[str, Any]:
        """Every Node the API lists, the pod template read: a missing credential or template is one line before
        the run."""
        try:
            pods.template(options.pod_template)
            if options.job_template:
                pods.template(options.job_template, "--job-template")
            listed = api.call("list Nodes", api.connect(options.kubeconfig).list_node).get("items") or []
        except (pods.TemplateError, api.KubernetesError) as exc:
            raise LauncherError(f"--launcher kubernetes: {exc}") from exc
        return {node["metadata"]["name"]: node for node in listed}

    def check_nodes(self, ctx: ClusterContext, done: Callable[[NodeOutcome], None]) -> None:
        known = ctx.scheduler_nodes if ctx.scheduler_nodes is not None else self.read_nodes(ctx.options)
        template, client = pods.template(ctx.options.pod_template), api.connect(ctx.options.kubeconfig)

        def one(host: Any) -> NodeOutcome:
            if host.name not in known:
                return NodeOutcome(host.name, Status.ERROR, f"no Kubernetes Node named {host.name}", "kubernetes",
                                   via="kubernetes")
            return pods.check(client, template, host.name, ctx.options)

        hosts = list(ctx.inventory.hosts)
        with ThreadPoolExecutor(max_workers=max(1, min(ctx.options.forks, len(hosts))),
                                thread_name_prefix="gpucheck-pod") as pool:
            for outcome in pool.map(one, hosts):
                done(outcome)

    def mpi_from(self, first: str) -> str:
        return self.through

    def probe(self, ctx: ClusterContext, run: RemoteHosts, node: str, command: str, timeout: float) -> Remote:
        """A pod of the job template on `node` (mpi_pods.run_pod)."""
        try:
            base, client = self._job(ctx)
        except (pods.TemplateError, api.KubernetesError) as exc:
            return Remote(node, command, error=str(exc), kind="usage")
        return mpi_pods.run_pod(client, base, node, command, timeout)

    def job_stacks(self, ctx: ClusterContext, run: RemoteHosts) -> str:
        """The job image's python and frameworks, asked once on the first usable node (one image for every node)."""
        if ctx.job_image is None:
            nodes = ctx.usable()
            if not nodes:
                return ""
            try:
                python = job_image.python_of(self._job(ctx)[0])
            except (pods.TemplateError, api.KubernetesError) as exc:
                return str(exc)
            done = self.probe(ctx, run, nodes[0], job_image.command(python), ctx.options.stage_timeout)
            ctx.job_image = job_image.read(done.stdout)
            if "error" in ctx.job_image:
                ctx.job_image["error"] = (f"the jobs' image (--job-template) on {nodes[0]}: {python} did not answer "
                                          f"({done.describe()})")
        return str(ctx.job_image.get("error") or "")

    def distribute(self, ctx: ClusterContext, run: RemoteHosts, nodes: Sequence[str], script: Path,
                   timeout: float = 60.0) -> tuple[str, dict[str, Remote]]:
        """Into every job's Secret from now on (mpi_pods): its pods find them at jobs.REMOTE_DIR."""
        ctx.job_files.update({path.name: path.read_bytes() for path in launch.workload_files(script)})
        return f"{jobs.REMOTE_DIR}/{script.name}", {}

    def mpi_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, program: Sequence[str],
                env: Mapping[str, str], timeout: float) -> Remote:
        """mpirun in a pod on the layout's first node, reaching worker pods on the others over SSH (mpi_pods)."""
        try:
            base, client = self._job(ctx)
        except (pods.TemplateError, api.KubernetesError) as exc:
            return Remote(lay.slots[0][0], "mpirun", error=str(exc), kind="usage")
        addresses = {node: address(ctx, node, data=False) for node, _ in lay.slots}
        return mpi_pods.mpi_job(client, base, lay, addresses, program, env, timeout, ctx.job_files)

    @staticmethod
    def _job(ctx: ClusterContext) -> tuple[dict[str, Any], Any]:
        """(the job template, an API client)."""
        return pods.template(ctx.options.job_template, "--job-template"), api.connect(ctx.options.kubeconfig)

    def torch_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, python: str, path: str,
                  args: Sequence[str], gpus: bool, port: int, timeout: float) -> Remote:
        return Remote(lay.slots[0][0], "torchrun", error=NOT_YET, kind="usage")

    def task_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, program: Sequence[str],
                 envs: Sequence[Mapping[str, str]], timeout: float) -> Remote:
        return Remote(lay.slots[0][0], "tasks", error=NOT_YET, kind="usage")

    def burns(self, ctx: ClusterContext, run: RemoteHosts, nodes: list[str], cmd: str, limit: float) -> Burns:
        raise LauncherError(f"the burn is {NOT_YET}")

    def drain(self, ctx: ClusterContext, doc: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
        """Each node's verdict told to its Node as the `cluster` path's (node_rule: gpucheck's taint, condition and
        label; an admin's cordon and taints untouched). A refusal every Node would meet stops it, said once."""
        try:
            client = api.connect(ctx.options.kubeconfig)
        except api.KubernetesError as exc:
            return [], str(exc)
        done: list[dict[str, str]] = []
        for node, (verdict, findings) in handoff.verdicts(doc).items():
            try:
                change = api.tell_node(client, node, "cluster", EXIT_OF_VERDICT[verdict], findings)
            except api.KubernetesError as exc:
                done.append({"node": node, "action": "error", "text": str(exc)})
                if isinstance(exc, api.Everywhere):
                    return done, str(exc)
                continue
            done.append({"node": node, "action": change.verb, "text": change.describe()})
        return done, handoff.not_updated(done)


KUBERNETES = KubernetesLauncher()
