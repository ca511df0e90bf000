"""The cpulist format shared by sysfs, /proc/cmdline, docker and numactl."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stackctl.host.cpulist import format_cpulist, parse_cpulist


@pytest.mark.parametrize("text, cpus", [
    ("", []),
    ("\n", []),
    ("0", [0]),
    ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
    ("8-11,0-1", [0, 1, 8, 9, 10, 11]),
    ("2,2,1-2", [1, 2]),
    ("0-47,96-143\n", list(range(0, 48)) + list(range(96, 144))),
    ("0-15:2/4", [0, 1, 4, 5, 8, 9, 12, 13]),  # the kernel's strided form
])
def test_parse(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1,,2", "1-4:0/2", "1-4:3/2", "0x1", "1 2"])
def test_parse_rejects_malformed(text):
    with pytest.raises(ValueError):
        parse_cpulist(text)


@pytest.mark.parametrize("cpus, text", [
    ([], ""),
    ([5], "5"),
    ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
    ({11, 10, 3, 2, 1, 0, 8}, "0-3,8,10-11"),
    ([1, 1, 2], "1-2"),
])
def test_format(cpus, text):
    assert format_cpulist(cpus) == text


def test_format_rejects_negative():
    with pytest.raises(ValueError):
        format_cpulist([-1, 0])


@given(st.sets(st.integers(min_value=0, max_value=1023)))
def test_round_trip(cpus):
    text = format_cpulist(cpus)
    assert parse_cpulist(text) == sorted(cpus)
    assert format_cpulist(parse_cpulist(text)) == text
