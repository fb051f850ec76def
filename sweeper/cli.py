"""Command line: `sweeper run SPEC`, `sweeper plan SPEC`, `sweeper report STUDY_DIR`.

Spec errors print `file:line: key.path: reason` and exit with status 2 before any Ray
process starts (Ray is imported only once the spec is known to be good).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sweeper.spec import SpecError, load_spec

EXIT_SPEC_ERROR = 2


def study_dir_for(spec, flag: str | None) -> Path:
    """--storage, else the spec's storage, else ./studies/<study name>."""
    return Path(flag or spec.storage or Path("studies") / spec.study).resolve()


def command_plan(args) -> int:
    from sweeper.plan import plan_study

    spec = load_spec(args.spec)
    plan = plan_study(spec)
    final = sum(1 for c in plan.checkpoints if c.step == c.run.total_steps)
    print(f"study {spec.study}")
    print(f"  pretraining runs:       {len(plan.runs)}")
    print(f"  evaluated checkpoints:  {len(plan.checkpoints)} ({final} final + {len(plan.checkpoints) - final} intermediate)")
    ft = spec.finetuning
    print(f"  fine-tuning trials:     {len(plan.trials)} = {len(plan.checkpoints)} checkpoints x {len(ft.tasks)} tasks"
          f" x {len(ft.learning_rates)} learning rates x {len(ft.seeds)} seeds")
    for run in plan.runs:
        print(f"    {run.name}  ({run.objective}, {run.total_steps} steps, checkpoints {list(run.checkpoint_steps)})")
    return 0


def command_run(args) -> int:
    from sweeper.plan import plan_study

    spec = load_spec(args.spec)
    plan = plan_study(spec)
    from sweeper.runner import run_study  # imports Ray: only after the spec is known good

    run_study(spec, Path(args.spec), plan, study_dir_for(spec, args.storage))
    return 0


def command_report(args) -> int:
    from sweeper.report import write_report

    study_dir = Path(args.study_dir)
    if not (study_dir / "results").exists():
        print(f"error: {study_dir} holds no results (expected {study_dir}/results/)", file=sys.stderr)
        return 1
    plan_file = study_dir / "plan.json"
    planned = json.loads(plan_file.read_text())["trials"] if plan_file.exists() else None
    write_report(study_dir, planned_trials=planned)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sweeper", description="Pretraining-objective studies on Ray.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run (or resume) a study from a search-space file")
    run.add_argument("spec", help="search-space YAML file, e.g. search_spaces/micro.yaml")
    run.add_argument("--storage", help="study directory (default: the spec's storage, else ./studies/<study>)")
    run.set_defaults(handler=command_run)
    plan = commands.add_parser("plan", help="print what a spec would run, without running it")
    plan.add_argument("spec")
    plan.set_defaults(handler=command_plan)
    report = commands.add_parser("report", help="write report.md for a study directory")
    report.add_argument("study_dir")
    report.set_defaults(handler=command_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except SpecError as error:
        print(f"spec error: {error}", file=sys.stderr)
        return EXIT_SPEC_ERROR


if __name__ == "__main__":
    sys.exit(main())
