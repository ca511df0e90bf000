"""Fact generation: read vLLM's and LMCache's own source releases and write stackctl/knowledge/facts/*.json.

Run through scripts/extract-facts.py. Nothing here is imported by stackctl itself: the generated JSON is what ships.
"""
