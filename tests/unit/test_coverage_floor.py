"""CI's per-module coverage floor (scripts/coverage_floor.py): which modules it holds to the floor, what it prints,
and its exit status on a real `coverage json` file layout."""

import importlib.util
import json

from helpers import REPO

_spec = importlib.util.spec_from_file_location("coverage_floor", REPO / "scripts" / "coverage_floor.py")
floor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(floor)


def _report(**percents) -> dict:
    """A `coverage json` report: path -> percent covered."""
    return {"meta": {"branch_coverage": True},
            "files": {path.replace("__", "/") + ".py": {"summary": {"percent_covered": percent,
                                                                    "percent_covered_display": str(round(percent))}}
                      for path, percent in percents.items()},
            "totals": {"percent_covered": 90.0}}


def test_only_the_package_modules_count_as_the_table_shows_them():
    report = _report(stackctl__deploy=73.4, stackctl__engine__docker_adapter=79.6, tests__helpers=10.0)
    report["files"]["/abs/checkout/stackctl/lock.py"] = {"summary": {"percent_covered": 85.25}}  # no display

    assert floor.package_modules(report, "stackctl") == {"stackctl/deploy.py": 73.0,
                                                         "stackctl/engine/docker_adapter.py": 80.0,
                                                         "/abs/checkout/stackctl/lock.py": 85.25}


def test_modules_under_the_floor_lowest_first_and_the_floor_itself_passes():
    modules = {"stackctl/b.py": 79.99, "stackctl/a.py": 60.0, "stackctl/c.py": 80.0, "stackctl/d.py": 79.99}

    assert floor.modules_under(modules, 80) == [("stackctl/a.py", 60.0), ("stackctl/b.py", 79.99),
                                                ("stackctl/d.py", 79.99)]


def test_verdict_lists_each_module_under_and_names_the_fix():
    passed, lines = floor.verdict({"stackctl/deploy.py": 73.0, "stackctl/lock.py": 95.0}, 80, "stackctl")

    assert not passed
    assert lines[0].startswith("coverage floor 80%: 1 stackctl module(s) under it (fix: ")
    assert lines[1].split() == ["stackctl/deploy.py", "73%"]
    assert len(lines) == 2


def test_verdict_passes_when_every_module_reaches_the_floor():
    assert floor.verdict({"stackctl/a.py": 80.0, "stackctl/b.py": 100.0}, 80, "stackctl") == (
        True, ["coverage floor 80%: all 2 stackctl modules reach it"])


def test_verdict_fails_when_no_module_was_measured():
    passed, lines = floor.verdict({}, 80, "stackctl")

    assert not passed and lines == ["coverage floor: no module of stackctl in the coverage report (was coverage "
                                    "measured?)"]


def test_main_exit_status_and_output(tmp_path, capsys):
    path = tmp_path / "coverage.json"
    path.write_text(json.dumps(_report(stackctl__deploy=79.5, stackctl__lock=90.0)))

    assert floor.main([str(path), "--floor", "81"]) == 1
    assert "stackctl/deploy.py" in capsys.readouterr().out
    assert floor.main([str(path)]) == 0  # 79.5 is shown, and judged, as 80
    assert capsys.readouterr().out == "coverage floor 80%: all 2 stackctl modules reach it\n"
    assert floor.main([str(tmp_path / "missing.json")]) == 1
    assert capsys.readouterr().out.startswith(f"coverage floor: cannot read {tmp_path / 'missing.json'}: ")
