"""`sweeper plan` says how long a CPU study takes: the cost model calibrated on measured CPU
throughput, one calibration per kind of CPU (sweeper.plan.cost.CPU_CALIBRATIONS,
benchmarks/wall_time.py)."""
import re
from dataclasses import replace

import pytest
from cli_process import sweeper_cli
from conftest import ROOT

from sweeper.plan.cost import cpu_wall_time, duration_text, parameters_text, wall_time_lines
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study


DEFAULT_STUDY_S = {"avx512": 15 * 60 + 50, "avx2": 26 * 60 + 41}
"""The default study (search_spaces/micro.yaml) measured on this project's 2-core machine, on each
kind of CPU it has had (docs/benchmarks.md, "The default study end to end"): 15m50s on an Intel
CPU with AVX512 on 2026-11-26, 26m41s on an AMD EPYC with AVX2 on 2026-11-29."""


@pytest.fixture(scope="module")
def micro():
    spec = load_study(ROOT / "search_spaces" / "micro.yaml").spec
    return spec, plan_study(spec)


@pytest.mark.parametrize("kind", sorted(DEFAULT_STUDY_S))
def test_the_default_study_is_estimated_within_30_percent_of_its_measured_time_on_2_cpus(micro, kind):
    estimate = cpu_wall_time(*micro, cpus=2, kind=kind)
    assert abs(estimate.seconds - DEFAULT_STUDY_S[kind]) <= 0.3 * DEFAULT_STUDY_S[kind], estimate
    assert estimate.pretraining_cpu_s > 0 and estimate.finetuning_cpu_s > estimate.pretraining_cpu_s
    assert estimate.unknown == 0


def test_more_cpus_take_less_time_down_to_the_longest_chain(micro):
    spec, plan = micro
    times = [cpu_wall_time(spec, plan, cpus, "avx2").seconds for cpus in (1, 2, 4, 1000)]
    assert times == sorted(times, reverse=True) and times[0] > 1.8 * times[1] - 60
    chain = cpu_wall_time(spec, plan, 1000, "avx2")
    assert chain.seconds > 45, "a continued run waits for its source: never all at once"


def test_a_gpu_study_is_timed_on_one_node_of_its_gpus(micro):
    spec, plan = micro
    on_gpus = replace(spec, resources=replace(spec.resources, gpus_per_trial=1))
    assert cpu_wall_time(on_gpus, plan, 2, "avx2") is None
    (line,) = wall_time_lines(on_gpus, plan, 2)
    assert line.startswith("  estimated wall time on one node of 8 GPUs"), line


def test_a_longer_study_is_estimated_longer(micro):
    spec, plan = micro
    longer = replace(spec, finetuning=replace(spec.finetuning, seeds=list(range(10))))  # twice the trials
    assert cpu_wall_time(longer, plan_study(longer), 2, "avx2").seconds > cpu_wall_time(spec, plan, 2, "avx2").seconds


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


def test_a_cpus_flags_pick_its_calibration_and_the_plan_names_it(micro, tmp_path, monkeypatch):
    """An AVX512 CPU takes the AVX512 calibration, an AVX2 one the AVX2 calibration (about 2x
    longer for the default study), and a CPU whose flags cannot be read the slower of the two."""
    import sweeper.plan.cost as cost
    from sweeper.contract import cpu

    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(cpu, "CPUINFO", str(cpuinfo))
    assert cost.cpu_flags() is None
    estimates = {}
    for flags, kind, named in ((None, "avx2", "an AVX2 CPU (this one's kind unknown: the slower calibration)"),
                               ("fpu sse avx2", "avx2", "an AVX2 CPU by"),
                               ("fpu sse avx2 avx512f", "avx512", "an AVX512 CPU by")):
        if flags is not None:
            cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
            assert cost.cpu_flags() == set(flags.split())
        assert cost.cpu_kind(cost.cpu_flags()) == (kind if flags else None)
        lines = wall_time_lines(*micro, cpus=2)
        assert lines[-1].startswith(f"    calibrated on {named}"), lines
        estimates[flags] = lines[0]
    assert estimates[None] == estimates["fpu sse avx2"] != estimates["fpu sse avx2 avx512f"]
    slower = cpu_wall_time(*micro, cpus=2, kind="avx2").seconds / cpu_wall_time(*micro, cpus=2, kind="avx512").seconds
    assert 1.3 < slower < 2.5, slower
