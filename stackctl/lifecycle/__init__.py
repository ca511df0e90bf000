"""The lifecycle wing: what changes a stack on a Docker engine.

The verbs: `build.py` (the image), `up.py` (one `up` as a transaction, on what `plan.py` derived once before it),
`down.py`, `status.py`. The parts they share, which doctor and bench read too: `preflight.py` (what `up` makes sure
of before it changes anything), `container.py` (the container's run arguments) and `health.py` (waiting for
/health, and what a stopped server says about why). The state dir, the per-stack lock and Ctrl-C shielding are
`stackctl/state/`.
"""
