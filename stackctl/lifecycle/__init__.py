"""The lifecycle wing: what changes a stack on a Docker engine.

The verbs: `build.py` (the image), `up.py` (one `up` as a transaction), `down.py`, `status.py`. The parts they
share, which doctor and bench read too: `state.py` (the one writer of the state dir), `lock.py` (the per-stack
lock), `signals.py` (Ctrl-C held back while steps that belong together run), `preflight.py` (what `up` makes sure
of before it changes anything), `container.py` (the container's run arguments) and `health.py` (waiting for
/health, and what a stopped server says about why).
"""
