"""The TOML parser stackctl reads recipes and its own tables with.

tomli (2.3 or later) is the standard library's tomllib as a wheel compiled with mypyc that imports neither `typing`
nor `string`: `stackctl validate` starts about 5 ms sooner with it than with tomllib, the same parser in pure
Python (benchmarks/startup.py). tomllib stands in where tomli is missing.
"""

try:
    from tomli import TOMLDecodeError, loads
except ImportError:  # pragma: no cover - tomli is a dependency; without it Python 3.11's own parser still reads TOML
    from tomllib import TOMLDecodeError, loads  # type: ignore[assignment]  # the same parser and API

__all__ = ["TOMLDecodeError", "loads"]
