"""The recipe rules: judgments of the recipe alone, before anything runs (`stackctl validate`, and render, build and
up, which refuse errors). `registry.py` declares a rule (`@rule`), `ruleset.py` loads every rule module and runs
them; the rule modules are `stack_rules.py` (the catalog of silent failures), `fact_rules.py` (facts read from the
packages), `guard_rules.py` (the recipe guarding itself) and `lmcache_rules.py` (LMCache settings). They sit above
`bundle/stackspec.py` because they judge what will run: the server's argv and environment."""
