"""Command line: `sweeper run SPEC`, `plan SPEC`, `status STUDY_DIR`, `report STUDY_DIR`.

Spec errors print `file:line: key.path: reason` and exit with status 2 before any Ray
process starts (Ray is imported only once the spec is known to be good).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sweeper.plan.load import load_spec
from sweeper.run.lease import EXIT_LEASE, LeaseHeld, hold_lease
from sweeper.spec.names import location_problem
from sweeper.spec.reading import SpecError
from sweeper.store import storage
from sweeper.store.layout import StudyLayout

EXIT_SPEC_ERROR = 2
EXIT_CHANGED = 3


def study_layout_for(spec, flag: str | None, spec_file: str = "spec") -> StudyLayout:
    """The study's layout, built once here and passed down to the store: its root is --storage,
    else the spec's storage, else ./studies/<study name>, as an absolute path or a URI. A local
    folder is created here, so one that cannot be (`/dev/null/x`, `/proc/x`, a name too long) is a
    SpecError naming it, before anything starts; a bucket must be reachable."""
    file, key = ("command line", "--storage") if flag is not None else (spec_file, "storage" if spec.storage else "study")
    if flag is not None and (problem := location_problem(flag, credentials_allowed=True)):  # keys: docs/security.md
        raise SpecError(file, key, problem)
    try:
        location = storage.normalize(flag or spec.storage or Path("studies") / spec.study)
        storage.make_dirs(location)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte, text that is not a file name
        where = flag or spec.storage or str(Path("studies") / spec.study)
        reason = getattr(error, "strerror", None) or str(error)
        where = storage.display(str(where))
        raise SpecError(file, key, f"cannot create the study folder {where!r}: {reason}") from None
    if problem := storage.reach_error(location):
        raise SpecError(file, key, problem)
    return StudyLayout(location)


def command_plan(args) -> int:
    from sweeper.plan.cost import describe_external, finetuning_cost, parameter_count, pretraining_cost
    from sweeper.plan.memory_check import check_runs, refusal, run_figure, summary
    from sweeper.plan.study_plan import plan_study, run_count_text, trial_count_text

    spec = load_spec(args.spec)
    plan = plan_study(spec)
    memory = check_runs(spec, plan.runs)
    final = sum(1 for c in plan.checkpoints if c.run is not None and c.step == c.run.total_steps)
    external = sum(1 for c in plan.checkpoints if c.external is not None)
    print(f"study {spec.study}")
    print(f"  pretraining runs:       {run_count_text(spec, plan)}")
    print(f"  evaluated checkpoints:  {len(plan.checkpoints)} ({final} final + "
          f"{len(plan.checkpoints) - final - external} intermediate" + (f" + {external} from elsewhere)" if external else ")"))
    for checkpoint in plan.checkpoints:
        if checkpoint.external is not None:
            print(f"    from elsewhere: {describe_external(checkpoint.external)}")
    print(f"  fine-tuning trials:     {trial_count_text(spec, plan)}")
    pre_cost, ft_cost = pretraining_cost(spec, plan.runs), finetuning_cost(spec, plan)
    print(f"  estimated GPU-hours at {spec.cost.gpu_peak_tflops:g} TFLOP/s x {spec.cost.utilization:.0%} utilisation "
          "(6 x parameters x tokens):")
    for stage, cost in (("pretraining", pre_cost), ("fine-tuning", ft_cost)):
        extra = f" (+ {cost.unknown} items sized at run time)" if cost.unknown else ""
        print(f"    {stage:12s} {cost.gpu_hours:>12,.1f} GPU-h  ({cost.flops:.2e} FLOPs){extra}")
    print(f"    {'total':12s} {pre_cost.gpu_hours + ft_cost.gpu_hours:>12,.1f} GPU-h")
    from sweeper.report.sequential_cost import plan_lines

    print("\n".join(plan_lines(spec, plan)), end="\n" if spec.pretraining.sequential else "")
    from sweeper.plan.cost import finetuning_comparison
    from sweeper.plan.memory_check import check_trials, trial_refusal, trial_summary

    trial_memory = check_trials(spec, plan.checkpoints)  # fine-tuning: the padded figure and the paper's units
    print("\n".join(finetuning_comparison(spec, plan, ft_cost) + trial_summary(spec, trial_memory)
                    + summary(spec, memory)))
    if args.verbose:
        print("  runs:")
        for run, run_memory in zip(plan.runs, memory):
            size = f"{parameter_count(run.model_config, include_embedding=True) / 1e6:,.0f}M params" \
                if run.model_config else "size from its source"
            extra = f", from {run.init_from}" if run.init_from else ""
            print(f"    {run.name}  ({run.objective}, {run.total_steps:,} steps, {size}{extra}, "
                  f"checkpoints {list(run.checkpoint_steps)}, {run_figure(run_memory)})")
    if problem := refusal(spec, memory, plan.runs) or trial_refusal(spec, trial_memory):
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    return 0


def command_run(args) -> int:
    from sweeper.plan.memory_check import check_runs, check_trials, refusal, trial_refusal
    from sweeper.plan.study_plan import plan_study

    spec = load_spec(args.spec)
    plan = plan_study(spec)
    # A run or trial that cannot fit its GPUs would fail hours in: refuse before any folder or Ray exists.
    if problem := (refusal(spec, check_runs(spec, plan.runs), plan.runs)
                   or trial_refusal(spec, check_trials(spec, plan.checkpoints))):
        print(f"error: {problem}\nNothing was started (`sweeper plan -v` shows every run's estimate).", file=sys.stderr)
        return EXIT_SPEC_ERROR

    layout = study_layout_for(spec, args.storage, args.spec)
    try:  # one driver per study: the lease comes before anything is written (sweeper.run.lease)
        lease = hold_lease(layout.lease, study=layout)
    except LeaseHeld as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_LEASE
    except OSError as error:  # a folder that exists but cannot be written, as in study_layout_for
        raise SpecError("command line" if args.storage else args.spec, "--storage" if args.storage else "storage",
                        f"cannot write the study's lease {storage.display(layout.lease)}: "
                        f"{error.strerror or error}") from None
    try:
        return run_with_lease(args, spec, plan, layout)
    finally:
        lease.release()  # (and at exit: atexit)


def run_with_lease(args, spec, plan, layout: StudyLayout) -> int:
    """`sweeper run` once the study's lease is held: changed cells, settings, then the study."""
    from sweeper.plan.changes import apply_recompute, find_changes, record_settings, refuse_unwritten_checkpoints
    from sweeper.store.state_files import set_aside_misplaced

    set_aside_misplaced(layout)  # a folder where plan.json goes, a journal that does not parse: moved aside, named
    refuse_unwritten_checkpoints(spec, plan, layout, args.spec)
    changes = find_changes(spec, plan, layout)
    if changes and not args.recompute_changed:
        print(f"error: the spec changes settings that recorded results depend on.\n{changes.describe()}\n"
              "Nothing was started. Rerun with --recompute-changed to recompute these cells "
              "(old results stay on disk and leave the report), or restore the old settings.", file=sys.stderr)
        return EXIT_CHANGED
    if changes:
        print(f"[study] recomputing changed cells:\n{changes.describe()}", flush=True)
        apply_recompute(changes, layout)
    storage.make_dirs(layout.root)
    record_settings(spec, plan, layout)
    from sweeper.run.runner import run_study  # imports Ray: only after the spec is known good

    return run_study(spec, Path(args.spec), plan, layout, retry_failed=args.retry_failed)


def command_status(args) -> int:
    from sweeper.report.status import print_status

    layout = StudyLayout(storage.normalize(args.study_dir))
    if not storage.exists(layout.spec):
        print(f"error: {storage.display(layout.root)} is not a study directory (no spec.yaml)", file=sys.stderr)
        return 1
    print_status(layout)
    return 0


def command_report(args) -> int:
    from sweeper.report.writer import write_report

    layout = StudyLayout(storage.normalize(args.study_dir))
    if not storage.list_names(layout.results):
        print(f"error: {storage.display(layout.root)} holds no results (expected "
              f"{storage.display(layout.results)}/)", file=sys.stderr)
        return 1
    write_report(layout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sweeper", description="Pretraining-objective studies on Ray.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run (or resume) a study from a search-space file")
    run.add_argument("spec", help="search-space YAML file, e.g. search_spaces/micro.yaml")
    run.add_argument("--storage", help="study directory or s3:// / gs:// URI (default: the spec's storage, "
                                       "else ./studies/<study>)")
    run.add_argument("--retry-failed", action="store_true", help="run failed runs and trials again")
    run.add_argument("--recompute-changed", action="store_true",
                     help="recompute cells whose settings changed since their results were recorded")
    run.set_defaults(handler=command_run)
    status = commands.add_parser("status", help="done / running / pending / diverged / failed per stage")
    status.add_argument("study_dir", help="study directory or URI")
    status.set_defaults(handler=command_status)
    plan = commands.add_parser("plan", help="print what a spec would run and cost, without running it")
    plan.add_argument("spec")
    plan.add_argument("-v", "--verbose", action="store_true", help="list every pretraining run")
    plan.set_defaults(handler=command_plan)
    report = commands.add_parser("report", help="write report.md for a study directory")
    report.add_argument("study_dir", help="study directory or URI")
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
