"""GPU device nodes (/dev/kfd, /dev/dri/renderD*) and the groups a user needs to open them (video, render)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stackctl.host.sysfs import read_text, under

KFD_DEVICE = "/dev/kfd"
DRI_DIR = "/dev/dri"
GPU_GROUPS = ("video", "render")


@dataclass(frozen=True)
class GroupFacts:
    """One group the GPU devices belong to, and the user's standing in it."""

    name: str
    gid: int | None  # None: the group does not exist on this host
    listed: bool  # /etc/group (or /etc/passwd's primary group) puts the user in it
    effective: bool  # this process holds the gid; listed but not effective means the user must log in again

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DeviceFacts:
    kfd: bool
    render_nodes: list[str] = field(default_factory=list)
    user: str | None = None
    uid: int | None = None
    groups: list[GroupFacts] = field(default_factory=list)

    def in_group(self, name: str) -> bool:
        """The user is in the group now (effective) or after logging in again (listed)."""
        return any(g.name == name and (g.effective or g.listed) for g in self.groups)

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    def to_dict(self) -> dict[str, Any]:
        return {"kfd": self.kfd, "render_nodes": list(self.render_nodes), "user": self.user, "uid": self.uid,
                "is_root": self.is_root, "groups": [g.to_dict() for g in self.groups]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceFacts:
        return cls(kfd=bool(data.get("kfd")), render_nodes=list(data.get("render_nodes", [])),
                   user=data.get("user"), uid=data.get("uid"),
                   groups=[GroupFacts(**g) for g in data.get("groups", [])])


def read_render_nodes(root: Path = Path("/")) -> list[str]:
    dri = under(root, DRI_DIR)
    if not dri.is_dir():
        return []
    minors = sorted(int(p.name[7:]) for p in dri.glob("renderD*") if p.name[7:].isdigit())
    return [f"{DRI_DIR}/renderD{minor}" for minor in minors]


def parse_group_file(text: str) -> dict[str, tuple]:
    """/etc/group -> {name: (gid, [members])}."""
    groups = {}
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) < 4 or not parts[2].isdigit():
            continue
        groups[parts[0]] = (int(parts[2]), [m for m in parts[3].split(",") if m])
    return groups


def _primary_gid(root: Path, user: str | None) -> int | None:
    for line in (read_text(root, "/etc/passwd") or "").splitlines():
        parts = line.split(":")
        if len(parts) >= 4 and parts[0] == user and parts[3].isdigit():
            return int(parts[3])
    return None


def _current_identity() -> tuple:
    uid = os.getuid()
    user: str | None
    try:
        import pwd  # noqa: PLC0415 - POSIX only
        user = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        user = os.environ.get("USER")
    gids = sorted(set(os.getgroups()) | {os.getgid()})
    return user, uid, gids


def read_device_facts(root: Path = Path("/"), user: str | None = None, uid: int | None = None,
                      gids: Sequence[int] | None = None) -> DeviceFacts:
    """Device nodes under `root` and the user's video/render membership per `root`/etc/group.

    user/uid/gids default to this process's identity; tests on fixture roots pass their own.
    """
    root = Path(root)
    if user is None and uid is None and gids is None:
        user, uid, gids = _current_identity()
    gid_set = set(gids or [])
    groups_file = parse_group_file(read_text(root, "/etc/group") or "")
    primary = _primary_gid(root, user)
    groups = []
    for name in GPU_GROUPS:
        gid, members = groups_file.get(name, (None, []))
        listed = gid is not None and (user in members or gid == primary)
        groups.append(GroupFacts(name, gid, listed, gid is not None and gid in gid_set))
    kfd = under(root, KFD_DEVICE).exists()
    return DeviceFacts(kfd=kfd, render_nodes=read_render_nodes(root), user=user, uid=uid, groups=groups)
