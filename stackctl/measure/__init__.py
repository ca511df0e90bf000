"""What runs in the stack's image to measure this host: the matmul peak per dtype, a running model's prefill floor.
host/ reads the machine; this room starts containers (through engine/) and keeps what they measured (state/)."""
