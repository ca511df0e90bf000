"""Where a KV tier keeps its data (process memory, a host directory, an S3 bucket), one module per storage behind
one interface (base.py): what the container mounts, what `up` makes ready, what doctor sees from the host and after
a round trip, and fleet doctor's shared-tier marker. A tier kind names its storage (knowledge/kinds.py, `storage`);
registry.py finds the module."""
