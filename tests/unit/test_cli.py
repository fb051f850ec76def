"""The command line's small things: `--version`, a closed pipe, help for every argument, and
every independent spec error in one run (sweeper.cli)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from conftest import ROOT, edited_spec
from sweeper import __version__, cli

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"sweeper {__version__}")


def test_plan_into_a_closed_pipe_exits_0_without_a_traceback():
    """`sweeper plan paper.yaml | head -1`: head leaves after one line, the plan's later writes
    meet a closed pipe."""
    shell = f"'{sys.executable}' -m sweeper plan search_spaces/paper.yaml -v | head -1; echo \"rc=${{PIPESTATUS[0]}}\""
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert done.stdout.splitlines() == ["study paper", "rc=0"], done.stdout
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_every_argument_of_every_subcommand_has_help():
    parser = cli.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(commands.choices) == {"run", "plan", "status", "results", "report", "schema"}
    for name, sub in [("sweeper", parser), *commands.choices.items()]:
        for action in sub._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)


def test_plan_and_run_report_three_independent_mistakes_at_once_in_line_order(tmp_path, capsys):
    spec = edited_spec(
        tmp_path,
        ("  preset: nano ", "  prest: nano "),
        ("  global_batch_size: 8 ", "  global_batch_size: -8 "),
        ("  seeds: [0, 1] ", "  seeds: [0, x] "),
    )
    for command in (["plan", str(spec)], ["run", str(spec), "--storage", str(tmp_path / "never")]):
        assert cli.main(command) == 2
        lines = capsys.readouterr().err.splitlines()
        assert [line.split(": ")[2] for line in lines] == [
            "model.prest", "pretraining.global_batch_size", "finetuning.seeds[1]"], lines
        assert all(line.startswith(f"spec error: {spec}:") for line in lines)
        assert [int(line.split(": ")[1].rsplit(":", 1)[1]) for line in lines] == [6, 15, 33]
    assert not (tmp_path / "never").exists()


def test_an_unknown_task_is_named_beside_a_bad_seed_and_a_misspelled_key(tmp_path, capsys):
    """Mistakes of the same section (a seed that is a string, a task no family holds) and of
    another (a misspelled key) in one run: the task's own check does not wait for the seed."""
    spec = edited_spec(tmp_path, ("  seq_len: 64 ", "  seq_lenn: 64 "), ("  seeds: [0, 1] ", "  seeds: [0, x] "),
                       ("[wordnet-supersense-cls, ", "[wordnet-supersense-clz, "))
    assert cli.main(["plan", str(spec)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[2] for line in lines] == [
        "data.seq_lenn", "finetuning.tasks[0]", "finetuning.seeds[1]"], lines
    assert "did you mean 'wordnet-supersense-cls'" in lines[1]


def test_a_list_of_many_bad_values_names_the_first_fifty_then_a_count(tmp_path, capsys):
    spec = edited_spec(tmp_path, ("  seeds: [0, 1] ", "  seeds: [" + ", ".join(["x"] * 120) + "] "))
    assert cli.main(["plan", str(spec)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 51 and lines[-1] == "spec error: ... and 70 more", lines[-2:]


def test_bare_sweeper_prints_the_commands_and_exits_2(capsys):
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert all(f"    {command} " in err for command in ("run", "status", "plan", "report")), err


def test_overrides_are_read_after_an_option_too(tmp_path, capsys):
    spec = str(ROOT / "search_spaces" / "smoke.yaml")
    assert cli.main(["plan", spec, "-v", "finetuning.seeds=[0]"]) == 0
    assert "overrides:              finetuning.seeds=[0]" in capsys.readouterr().out
    # After --storage: read and checked as an override (the study folder is never reached).
    assert cli.main(["plan", spec, "--storage", str(tmp_path / "none"), "finetuning.seeds=3"]) == 2
    assert "spec error: override finetuning.seeds=3: finetuning.seeds: expected a list, got an integer 3" \
        in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["plan", spec, "--storage", str(tmp_path / "none"), "--bogus"])
    assert exited.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_a_scalar_where_a_list_is_meant_is_a_spec_error_naming_file_line_and_key(tmp_path, capsys):
    spec = edited_spec(tmp_path, ("  seeds: [0, 1] ", "  seeds: 3 "))
    assert cli.main(["plan", str(spec)]) == 2
    assert capsys.readouterr().err.strip() == (f"spec error: {spec}:33: finetuning.seeds: expected a list, got an "
                                               "integer 3: write [3] for a list of that one value")


def test_status_takes_the_folder_the_study_name_or_the_spec(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = edited_spec(tmp_path)
    (tmp_path / "studies" / "smoke").mkdir(parents=True)
    (tmp_path / "studies" / "smoke" / "spec.yaml").write_text(spec.read_text())
    for given in (str(tmp_path / "studies" / "smoke"), "smoke", str(spec)):
        assert cli.main(["status", given]) == 0, given
        assert capsys.readouterr().out.startswith(f"study smoke ({tmp_path / 'studies' / 'smoke'})"), given
    assert cli.main(["status", "other"]) == 1
    assert "studies/other is not a study directory (no spec.yaml)" in capsys.readouterr().err


def test_each_commands_help_ends_with_examples_and_exit_statuses(capsys):
    for command in ("run", "plan", "status", "results", "report", "schema"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = capsys.readouterr().out
        examples, statuses = out.split("examples:\n")[1].split("\nexit status:\n")
        assert examples.splitlines()[0].startswith(f"  sweeper {command} "), out
        assert statuses.splitlines()[0] == "  0    " + cli.EPILOGS[command][1][0].split(maxsplit=1)[1], out
