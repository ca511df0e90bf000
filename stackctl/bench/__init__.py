"""`stackctl bench`: what the cache buys, measured against real stacks.

One module per job: server (the server's own cache counters and KV capacity), workload (prompts, agentic sessions
and conversations, the driver), trace (kv-cache-tester traces read and replayed), probe (recompute / HBM / LMCache on the same prompts), report (table, PNG,
JSON of a workload run), setups (the stacks and containers a measurement runs on: found running, or brought up and
taken down again), sweep (load points x arms, each arm a server of its own), sweep_lock (one sweep per stack at a time), crossover (the sweep's arithmetic and
plan's prediction beside it) and sweep_report (the sweep's table, PNG, JSON).
"""
