"""What stackctl does with a Docker engine: `docker_adapter.py`, the one module that imports docker-py, and beside
it `container.py` (the stack container's run arguments) and `health.py` (waiting for /health, why a server stopped)."""
