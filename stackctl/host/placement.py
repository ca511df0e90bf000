"""The one place a pinning decision becomes what runs: the container's cpuset and the server's launcher.

`stackctl up` gives the container `cpuset` (docker-py's cpuset_cpus / cpuset_mems) and passes the launcher to
serve.sh in two variables: the numactl line, and the taskset line serve.sh runs instead when the image has no
numactl (and says so on stderr). Both lines carry the decision's CPU list, the same one as the cpuset. No other
module writes these variables or pinning kwargs.

Binding memory needs CAP_SYS_NICE in a container: Docker's default seccomp profile allows set_mempolicy/mbind only
with it, and numactl --membind exits 1 ("set_mempolicy: Operation not permitted") without.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from stackctl.host.pinning import PinningDecision

LAUNCHER_VAR = "STACKCTL_LAUNCHER"
FALLBACK_VAR = "STACKCTL_LAUNCHER_FALLBACK"


@dataclass(frozen=True)
class Placement:
    """What runs for one decision: docker-py cpuset kwargs, the launcher argv and its taskset fallback."""

    cpuset: dict[str, str] = field(default_factory=dict)
    launcher: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()  # added to the container's cap_add

    def environment(self) -> dict[str, str]:
        """The container variables serve.sh builds its launcher from; empty when nothing is pinned, so that a
        value from elsewhere (serve.env) never survives. cpulists and numactl options hold no spaces, so a line
        splits back into exactly these words."""
        return {LAUNCHER_VAR: " ".join(self.launcher), FALLBACK_VAR: " ".join(self.fallback)}

    def command_line(self, server_argv: Sequence[str]) -> str:
        """The exact command serve.sh executes (when numactl is in the image)."""
        return shlex.join([*self.launcher, *server_argv])


def cpuset_kwargs(cpus: str | None, mems: str | None) -> dict[str, str]:
    """docker-py's cpuset arguments for a CPU list and memory nodes (empty or None: none): a decision's, or what the
    engine reports a running container has (bench measures on those)."""
    return {key: value for key, value in (("cpuset_cpus", cpus), ("cpuset_mems", mems)) if value}


def placement(decision: PinningDecision) -> Placement:
    """node: numactl --cpunodebind/--membind; cpulist: numactl --physcpubind (and --membind when memory is bound);
    membind: numactl --membind; off: nothing. The fallback is `taskset -c` with the same CPU list."""
    cpus, mems = decision.cpuset_cpus, decision.cpuset_mems
    cpuset = cpuset_kwargs(cpus, mems)
    kind = decision.kind
    if kind == "off":
        return Placement()
    if kind == "node":
        launcher: tuple[str, ...] = ("numactl", f"--cpunodebind={mems}", f"--membind={mems}")
    else:
        launcher = ("numactl",) + ((f"--physcpubind={cpus}",) if cpus else ()) + ((f"--membind={mems}",) if mems else ())
    fallback = ("taskset", "-c", cpus) if cpus else ()
    return Placement(cpuset, launcher, fallback, ("SYS_NICE",) if mems else ())
