"""What doctor reads out of the server's own log, parsed into figures: pure functions of text, no I/O. The checks
(stackctl/doctor/*_checks.py, lmcache_live.py, omp_binding.py) judge what these return; bench reports it too."""
