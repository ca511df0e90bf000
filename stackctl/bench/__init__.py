"""`stackctl bench`: what the cache buys, measured against real stacks.

One module per job: server (the server's own cache counters), workload (prompts, agentic sessions, traces, the
driver), probe (recompute / HBM / LMCache on the same prompts), report (table, PNG, JSON of a workload run) and
setups (the stacks and containers a measurement runs on: found running, or brought up and taken down again).
"""
