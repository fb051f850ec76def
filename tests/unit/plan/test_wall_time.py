"""`sweeper plan` says how long a CPU study takes: the cost model calibrated on measured CPU
throughput (sweeper.plan.cost.CPU_CALIBRATION, benchmarks/wall_time.py)."""
import re
from dataclasses import replace

import pytest
from cli_process import sweeper_cli
from conftest import ROOT

from sweeper.plan.cost import cpu_wall_time, duration_text, parameters_text, wall_time_lines
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study


DEFAULT_STUDY_S = 15 * 60 + 50
"""The default study (search_spaces/micro.yaml) measured on this project's 2-core machine on
2026-11-26: 15m50s of study (docs/benchmarks.md, "The default study end to end")."""


@pytest.fixture(scope="module")
def micro():
    spec = load_study(ROOT / "search_spaces" / "micro.yaml").spec
    return spec, plan_study(spec)


def test_the_default_study_is_estimated_within_30_percent_of_its_measured_time_on_2_cpus(micro):
    estimate = cpu_wall_time(*micro, cpus=2)
    assert abs(estimate.seconds - DEFAULT_STUDY_S) <= 0.3 * DEFAULT_STUDY_S, estimate
    assert estimate.pretraining_cpu_s > 0 and estimate.finetuning_cpu_s > estimate.pretraining_cpu_s
    assert estimate.unknown == 0


def test_more_cpus_take_less_time_down_to_the_longest_chain(micro):
    spec, plan = micro
    times = [cpu_wall_time(spec, plan, cpus).seconds for cpus in (1, 2, 4, 1000)]
    assert times == sorted(times, reverse=True) and times[0] > 1.8 * times[1] - 60
    chain = cpu_wall_time(spec, plan, 1000)
    assert chain.seconds > 45, "a continued run waits for its source: never all at once"


def test_a_gpu_study_is_timed_on_one_node_of_its_gpus(micro):
    spec, plan = micro
    on_gpus = replace(spec, resources=replace(spec.resources, gpus_per_trial=1))
    assert cpu_wall_time(on_gpus, plan, 2) is None
    (line,) = wall_time_lines(on_gpus, plan, 2)
    assert line.startswith("  estimated wall time on one node of 8 GPUs"), line


def test_a_longer_study_is_estimated_longer(micro):
    spec, plan = micro
    longer = replace(spec, finetuning=replace(spec.finetuning, seeds=list(range(10))))  # twice the trials
    assert cpu_wall_time(longer, plan_study(longer), 2).seconds > cpu_wall_time(spec, plan, 2).seconds


def test_plan_prints_the_wall_time_and_the_size_of_small_models(tmp_path):
    result = sweeper_cli("plan", "-v", "search_spaces/micro.yaml", cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    line = re.search(r"estimated wall time on (\d+) CPUs? \(this machine's\): ~(\d+) min", result.stdout)
    assert line, result.stdout
    assert "0M params" not in result.stdout and re.search(r"\d+k params", result.stdout)


def test_texts():
    assert duration_text(14 * 60) == "14 min" and duration_text(3 * 3600) == "3.0 h"
    assert duration_text(5 * 86400) == "5.0 days"
    assert parameters_text(410_000) == "410k params" and parameters_text(1_234_567) == "1.2M params"
    assert parameters_text(610_000_000) == "610M params"


def test_lines_name_the_cpus(micro):
    lines = wall_time_lines(*micro, cpus=2)
    assert lines[0].startswith("  estimated wall time on 2 CPUs") and "CPU-min" in lines[1]


def test_a_cpu_unlike_the_calibrations_is_named(micro, tmp_path, monkeypatch):
    import sweeper.plan.cost as cost
    from sweeper.contract import cpu

    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(cpu, "CPUINFO", str(cpuinfo))
    assert cost.cpu_flags() is None, "no file: no note"
    for flags, noted in (("fpu sse avx2", True), ("fpu sse avx2 avx512f", False)):
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        assert cost.cpu_flags() == set(flags.split())
        lines = wall_time_lines(*micro, cpus=2)
        assert any("calibrated on a CPU with AVX512, which this one lacks" in line for line in lines) == noted, lines
