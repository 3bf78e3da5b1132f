"""The acting loop wired to the daemon: the topology says which node a root sits in and how many
nodes a rack or pod has (the breaker's scope), the policy file says how actions are done, pages
become notices (published, written to InfluxDB, logged at ERROR)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from act.audit import AuditLog
from act.executors import Executor, SiteCommand, SlurmCli, Webhook
from act.loop import ActLoop
from act.policy import ActConfig
from rca.graph import TopologyGraph

log = logging.getLogger(__name__)


def executors_of(config: ActConfig) -> dict[str, Executor]:
    out: dict[str, Executor] = {}
    if config.executors.slurm:
        slurm = SlurmCli(config.executors.slurm_env, config.executors.scontrol)
        out["drain"] = out["resume"] = out["requeue"] = out["cordon"] = slurm
    k8s = config.executors.kubernetes
    if k8s is not None:
        from act.kubernetes import KubernetesNodes
        from context.scheduler.kubernetes import ApiConfig

        if k8s.in_cluster:
            api = ApiConfig.in_cluster()
        elif k8s.server:
            api = ApiConfig(
                k8s.server,
                Path(k8s.token_file) if k8s.token_file else None,
                Path(k8s.ca_file) if k8s.ca_file else None,
            )
        else:
            raise ValueError("executors.kubernetes needs in_cluster: true or a server")
        out["drain"] = out["resume"] = out["cordon"] = KubernetesNodes(api)
    for action, argv in config.executors.commands.items():  # a site's own tool wins over scontrol
        out[action] = SiteCommand(argv)
    for action, url in config.executors.webhooks.items():
        out[action] = Webhook(url)
    return out


def act_loop(
    config: ActConfig,
    graph: TopologyGraph,
    audit_path: Path | None,
    page: Callable[[str, str], None],
    executors: dict[str, Executor] | None = None,
    jobs_on: Callable[[str, float], dict[str, int]] = lambda node, t: {},
    action_sink: Callable[[str], None] | None = None,
    job_ends: Callable[[str, float], dict[str, float]] = lambda node, t: {},
) -> ActLoop:
    """`jobs_on(node, t)`: the jobs running on a node and the GPUs each holds; `job_ends(node, t)`:
    when the scheduler ends them at the latest (their time limits), where it says."""
    per = config.breaker.per
    nodes = [e for e in graph.ids if graph.kind(e) == "node"]

    def scope_of(node: str) -> str | None:
        if per == "rack":
            return graph.ancestor(node, "rack")
        if per == "pod":
            _, pod = graph.rail_and_pod(node)
            return f"pod{pod}" if pod >= 0 else graph.ancestor(node, "group")
        return None

    sizes = Counter(scope_of(n) for n in nodes)

    def scope_size(scope: str | None) -> int:
        return len(nodes) if scope is None else sizes.get(scope, 0)

    def node_of(entity: str) -> str | None:
        return graph.node_of(entity) if entity in graph else None

    audit = AuditLog(audit_path)
    if action_sink is not None:  # every change of a plan as an aiops_action point (InfluxDB)
        from act.influx import action_line

        sink = action_sink
        audit.listener = lambda row: sink(action_line(row))
    chosen = executors if executors is not None else executors_of(config)
    loop = ActLoop(config, audit, chosen, page, node_of, scope_size, scope_of, jobs_on, job_ends)
    slurm = chosen.get("requeue")
    if loop.remediation is not None and isinstance(slurm, SlurmCli):
        loop.remediation.job_state = slurm.job_state  # when a requeued job runs again
    resume = chosen.get("resume")
    if loop.remediation is not None and config.remediation is not None and isinstance(resume, SlurmCli):
        loop.remediation.spare_ready = spare_check(resume, config.remediation.spare_reason)
    return loop


def spare_check(slurm: SlurmCli, reason: str) -> Callable[[str], bool]:
    """Whether Slurm shows a node drained with the spares' reason now (not one drained for repair)."""

    def ready(node: str) -> bool:
        try:
            state = slurm.node(node)
        except Exception:  # unknown to Slurm, or Slurm not answering: not a spare to resume now
            log.warning("spare %s: Slurm does not say it is a spare; passed over", node, exc_info=True)
            return False
        return "DRAIN" in state.get("State", "") and state.get("Reason", "") == reason

    return ready


__all__ = ["act_loop", "executors_of", "spare_check"]
