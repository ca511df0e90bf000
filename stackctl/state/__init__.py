"""What keeps a stack's record safe across processes and Ctrl-C: `store.py` (the one writer of the state dir:
kept deployments, history, fleet runs, atomic writes), `lock.py` (the per-stack lock) and `signals.py` (Ctrl-C held
back while steps that belong together run). The lifecycle, doctor, bench and fleet read them; they import nothing
of stackctl above the base layer."""
