"""Command line: `sweeper run SPEC [KEY=VALUE ...]`, `plan SPEC [KEY=VALUE ...] [--storage STUDY]`,
`status STUDY` (a folder, a study name or the spec file), `results STUDY`, `report STUDY_DIR`; overrides may come
anywhere on the line, and bare `sweeper` prints the commands (exit 2).

Every command reads its spec through `sweeper.plan.load.load_study` (one way into a study).
Spec errors print `file:line: key.path: reason`, every independent one, and exit with status 2
before any Ray process starts (Ray is imported only once the spec is known to be good).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sweeper.contract import registry
from sweeper.contract.heavy_imports import imports_frozen
from sweeper.plan import load as loading
from sweeper.run.interrupts import interruptible, interrupted_line
from sweeper.run.lease import EXIT_LEASE, LeaseHeld, hold_lease
from sweeper.spec.names import location_problem
from sweeper.spec.reading import SpecError, SpecErrors
from sweeper.store import storage
from sweeper.store.filesystems import refusal
from sweeper.store.layout import StudyLayout

EXIT_SPEC_ERROR = 2
EXIT_CHANGED = 3


def default_location(spec) -> str | Path:
    """Where a study lives without --storage: the spec's storage, else ./studies/<study name>."""
    return spec.storage or Path("studies") / spec.study


def study_layout_for(spec, flag: str | None, spec_file: str = "spec") -> StudyLayout:
    """The study's layout, built once here and passed down to the store: its root is --storage,
    else the spec's storage, else ./studies/<study name>, as an absolute path or a URI. A local
    folder is created here, so one that cannot be (`/dev/null/x`, `/proc/x`, a name too long) is a
    SpecError naming it, before anything starts; a bucket must be reachable."""
    file, key = (
        ("command line", "--storage") if flag is not None else (spec_file, "storage" if spec.storage else "study")
    )
    if flag is not None and (problem := location_problem(flag, credentials_allowed=True)):  # keys: docs/security.md
        raise SpecError(file, key, problem)
    try:
        location = storage.normalize(flag or default_location(spec))
        storage.make_dirs(location)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte, text that is not a file name
        where = flag or spec.storage or str(Path("studies") / spec.study)
        reason = getattr(error, "strerror", None) or str(error)
        where = storage.display(str(where))
        raise SpecError(file, key, f"cannot create the study folder {where!r}: {reason}") from None
    if problem := storage.reach_error(location):
        raise SpecError(file, key, problem)
    return StudyLayout(location)


def warn_unread(spec, spec_file: str) -> None:
    """A warning per setting that does nothing here but is harmless (sweeper.spec.ignored), named."""
    from sweeper.spec.ignored import harmless_settings

    for key, note in harmless_settings(spec):
        print(f"warning: {spec_file}: {key}: {note}", file=sys.stderr)


def command_plan(args) -> int:
    from sweeper.plan.plan_text import plan_lines

    study = loading.load_study(args.spec, args.overrides, machine=True)
    warn_unread(study.spec, args.spec)
    lines = plan_lines(study, args.verbose)
    with imports_frozen():  # the report's tests: pandas, scipy.stats
        from sweeper.design.decidable import plan_lines as decidable_lines

    lines += decidable_lines(study, args.verbose)
    if study.spec.pretraining.sequential is not None:  # its expected cost: a sequential plan's only
        from sweeper.design.sequential_cost import plan_lines as sequential_lines

        lines += sequential_lines(study)
    print("\n".join(lines))
    if args.storage is not None:
        from sweeper.plan.preview import preview_lines

        layout = existing_study(args.storage)
        if layout is None:
            return 1
        print("\n".join(preview_lines(study, layout)))
    if study.refusal:
        print(f"error: {study.refusal}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    return 0


def command_run(args) -> int:
    """`sweeper run`; SIGINT or SIGTERM at any stage ends it with one line and 128 + the signal
    (sweeper.run.interrupts), what finished recorded."""
    where: dict = {}  # the study and its layout, once known: what the interrupted line counts
    with interruptible() as interruption:
        try:
            return run_interruptibly(args, where)
        except KeyboardInterrupt:  # ours (Interrupted), or Ray's in its place: interruption.signum says which
            print(interrupted_line(*recorded_count(where), args.spec), file=sys.stderr, flush=True)
            return interruption.exit_status


def recorded_count(where: dict) -> tuple[int | None, int | None]:
    """(planned trials recorded, planned trials) of the study being run; None where not yet known."""
    study, layout = where.get("study"), where.get("layout")
    if study is None:
        return None, None
    planned = {t.trial_key for t in study.plan.trials}
    if layout is None or not storage.exists(layout.root):
        return 0, len(planned)
    from sweeper.store.results import finished_trial_keys  # pyarrow: only once a study was started

    return len(finished_trial_keys(layout) & planned), len(planned)


def run_interruptibly(args, where: dict) -> int:
    study = where["study"] = loading.load_study(args.spec, args.overrides, machine=True)
    warn_unread(study.spec, args.spec)
    # A run or trial that cannot fit its GPUs would fail hours in: refuse before any folder or Ray exists.
    if study.refusal:
        print(f"error: {study.refusal}\nNothing was started (`sweeper plan -v` shows every run's estimate).",
              file=sys.stderr)
        return EXIT_SPEC_ERROR

    layout = where["layout"] = study_layout_for(study.spec, args.storage, args.spec)
    try:  # one driver per study: the lease comes before anything is written (sweeper.run.lease)
        lease = hold_lease(layout.lease, study=layout)
    except LeaseHeld as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_LEASE
    except OSError as error:  # a folder that exists but cannot be written, as in study_layout_for
        if refusal(error):  # a bucket's refusal (credentials, a policy): main's storage error, exit 1
            raise
        raise SpecError("command line" if args.storage else args.spec, "--storage" if args.storage else "storage",
                        f"cannot write the study's lease {storage.display(layout.lease)}: "
                        f"{error.strerror or error}") from None
    try:
        return run_with_lease(args, study, layout)
    finally:
        lease.release()  # (and at exit: atexit)


def run_with_lease(args, study, layout: StudyLayout) -> int:
    """`sweeper run` once the study's lease is held: changed cells, settings, then the study."""
    from sweeper.plan.changes import apply_recompute, find_changes, record_settings, refuse_unwritten_checkpoints
    from sweeper.store.state_files import set_aside_misplaced

    spec, plan = study.spec, study.plan
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
    with imports_frozen():  # Ray, Tune, pandas, scipy.stats, matplotlib: only after the spec is known good
        from sweeper.run.runner import run_study

    return run_study(study, layout, retry_failed=args.retry_failed)


def existing_study(location: str) -> StudyLayout | None:
    """The layout of the study at `location`, or None (with an error printed) when it holds none."""
    layout = StudyLayout(storage.normalize(location))
    if not storage.exists(layout.spec):
        print(f"error: {storage.display(layout.root)} is not a study directory (no spec.yaml)", file=sys.stderr)
        return None
    return layout


def status_location(given: str) -> str:
    """The study `sweeper status` means by `given`: a study folder or URI as it is; a spec file:
    where that spec's study lives without --storage; else a study name under ./studies/."""
    if storage.is_remote(given) or storage.exists(StudyLayout(storage.normalize(given)).spec):
        return given
    if Path(given).is_file():
        return str(default_location(loading.load_study(given).spec))
    if given and "/" not in given and given not in (".", ".."):
        return str(Path("studies") / given)
    return given


def command_status(args) -> int:
    with imports_frozen():
        from sweeper.report.status import print_status

    layout = existing_study(status_location(args.study_dir))
    if layout is None:
        return 1
    print_status(layout, loading.load_study(layout.spec))
    return 0


def study_results(study: str | Path, every: bool = False):
    """`sweeper.results`: the rows the study's report used, as a DataFrame (every recorded row with
    `every`); `study` as `sweeper status` takes it (status_location)."""
    from sweeper.report.used_rows import study_rows

    layout = StudyLayout(storage.normalize(status_location(str(study))))
    if not storage.exists(layout.spec):
        raise FileNotFoundError(f"{storage.display(layout.root)} is not a study directory (no spec.yaml)")
    return study_rows(layout, every)


def command_results(args) -> int:
    with imports_frozen():
        from sweeper.report.used_rows import FORMATS, rows_bytes, study_rows

    suffix = Path(args.output).suffix.lstrip(".") if args.output else ""
    form = args.format or (suffix if suffix in FORMATS else "csv")  # rows.parquet: Parquet unless told
    if form == "parquet" and not args.output:
        print("error: --format parquet needs --output PATH (binary)", file=sys.stderr)
        return EXIT_SPEC_ERROR
    layout = existing_study(status_location(args.study))
    if layout is None:
        return 1
    data = rows_bytes(study_rows(layout, args.all), form)
    if args.output:
        Path(args.output).write_bytes(data)
    else:
        sys.stdout.write(data.decode())
    return 0


def command_report(args) -> int:
    with imports_frozen():
        from sweeper.report.writer import write_report

    layout = StudyLayout(storage.normalize(args.study_dir))
    if not storage.list_names(layout.results):
        print(f"error: {storage.display(layout.root)} holds no results (expected "
              f"{storage.display(layout.results)}/)", file=sys.stderr)
        return 1
    write_report(layout)  # the study's spec copy read through load_study (sweeper.report.writer.study_space)
    return 0


OVERRIDES_HELP = ("overrides of the spec's keys, each key.path=value with a YAML value "
                  "(finetuning.seeds=[0], pretraining.steps=100), checked as if the file said so")


EPILOGS = {
    "run": (["sweeper run search_spaces/micro.yaml",
             "sweeper run my.yaml --storage studies/mine finetuning.seeds=[0,1,2]"],
            ["0    done", "1    a run or trial failed (--retry-failed reruns it)",
             "2    a spec error, or a request that cannot run", "3    settings changed under recorded results "
             "(--recompute-changed)", "4    another driver holds the study",
             "130  interrupted by SIGINT (143: SIGTERM); a rerun resumes"]),
    "plan": (["sweeper plan search_spaces/paper.yaml -v", "sweeper plan my.yaml --storage studies/mine "
                                                          "finetuning.seeds=[0]"],
             ["0    planned", "1    --storage holds no study", "2    a spec error, or a run or trial that cannot fit"]),
    "status": (["sweeper status studies/micro", "sweeper status micro", "sweeper status search_spaces/micro.yaml"],
               ["0    shown", "1    not a study", "2    the spec does not read"]),
    "results": (["sweeper results micro > rows.csv", "sweeper results studies/micro --output rows.parquet",
                 "sweeper results search_spaces/micro.yaml --format json --all"],
                ["0    written", "1    not a study", "2    the spec does not read, or Parquet without --output"]),
    "report": (["sweeper report studies/micro"],
               ["0    written", "1    no results", "2    the study's spec copy does not read"]),
    "schema": (["sweeper schema > search_spaces/schema.json"], ["0    printed"]),
}
"""Each command's `--help` ends with (examples, exit statuses)."""


def command_schema(args) -> int:
    """The spec's JSON Schema on stdout (sweeper.spec.schema): for editors, through the
    `# yaml-language-server: $schema=...` first line of a spec."""
    from sweeper.spec.schema import schema_text

    sys.stdout.write(schema_text())
    return 0


def add_command(commands, name: str, help_text: str) -> argparse.ArgumentParser:
    examples, statuses = EPILOGS[name]
    return commands.add_parser(name, help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog="examples:\n" + "".join(f"  {line}\n" for line in examples)
                               + "\nexit status:\n" + "".join(f"  {line}\n" for line in statuses))


def build_parser() -> argparse.ArgumentParser:
    from sweeper.run.version import code_version

    parser = argparse.ArgumentParser(prog="sweeper", description="Pretraining-objective studies on Ray.")
    parser.add_argument("--version", action="version", version=f"sweeper {code_version()}",
                        help="print the package version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = add_command(commands, "run", "run (or resume) a study from a search-space file")
    run.add_argument("spec", help="search-space YAML file, e.g. search_spaces/micro.yaml")
    run.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=OVERRIDES_HELP)
    run.add_argument("--storage", help="study directory or s3:// / gs:// URI (default: the spec's storage, "
                                       "else ./studies/<study>)")
    run.add_argument("--retry-failed", action="store_true", help="run failed runs and trials again")
    run.add_argument("--recompute-changed", action="store_true",
                     help="recompute cells whose settings changed since their results were recorded")
    run.set_defaults(handler=command_run)
    status = add_command(commands, "status", "done / running / pending / diverged / failed per stage")
    status.add_argument("study_dir", metavar="STUDY", help="study directory or s3:// / gs:// URI, a study name "
                                                           "(./studies/NAME), or the spec file (its study's folder)")
    status.set_defaults(handler=command_status)
    plan = add_command(commands, "plan", "print what a spec would run and cost, without running it")
    plan.add_argument("spec", help="search-space YAML file, e.g. search_spaces/micro.yaml")
    plan.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=OVERRIDES_HELP)
    plan.add_argument("-v", "--verbose", action="store_true", help="list every pretraining run")
    plan.add_argument("--storage", metavar="STUDY",
                      help="a study that holds results: also print which trials and runs this spec would add, "
                           "keep, recompute or refuse there (nothing is run)")
    plan.set_defaults(handler=command_plan)
    results = add_command(commands, "results", "write the result rows the report used (csv, json, parquet)")
    results.add_argument("study", metavar="STUDY", help="as for status: study directory or URI, study name, or spec")
    results.add_argument("--format", choices=["csv", "json", "parquet"],
                         help="csv (default), json (an array of rows) or parquet (needs --output); default: "
                              "the --output file's suffix if it names one")
    results.add_argument("--output", metavar="PATH", help="file to write (default: standard output)")
    results.add_argument("--all", action="store_true", help="every recorded row, superseded ones included "
                                                            "(the `standing` column says which)")
    results.set_defaults(handler=command_results)
    report = add_command(commands, "report", "write report.md for a study directory")
    report.add_argument("study_dir", help="study directory or s3:// / gs:// URI")
    report.set_defaults(handler=command_report)
    schema = add_command(commands, "schema", "print the spec's JSON Schema (editors complete and check specs with it)")
    schema.set_defaults(handler=command_schema)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The command line, with KEY=VALUE overrides taken anywhere on it (`plan FILE --storage X
    key=value`): argparse leaves those after an option unparsed, and they are the command's
    overrides if it takes some; anything else unparsed is refused as argparse would."""
    args, rest = parser.parse_known_args(argv)
    if rest and hasattr(args, "overrides") and not any(word.startswith("-") for word in rest):
        args.overrides = [*args.overrides, *rest]
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if not argv:  # bare `sweeper`: the commands, on stderr, and the usage error's status
        parser.print_help(sys.stderr)
        return EXIT_SPEC_ERROR
    args = parse(parser, argv)
    try:
        return args.handler(args)
    except SpecError as error:
        # SpecErrors: every independent mistake, one a line
        print("\n".join(error.lines("spec error: ") if isinstance(error, SpecErrors) else [f"spec error: {error}"]),
              file=sys.stderr)
        return EXIT_SPEC_ERROR
    except registry.PluginError as error:
        print(f"plugin error: {error}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except BrokenPipeError:  # `sweeper plan X | head -1`: the reader left; quiet, as other commands are
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit would raise again
        return 0
    except OSError as error:  # a full disk, refused credentials: one line naming where, not a traceback
        from sweeper.store.permanent_errors import permanent_line

        if (line := permanent_line(error, getattr(args, "study_dir", None) or getattr(args, "storage", None))) is None:
            raise
        print(f"storage error: {line}\nWhat was recorded before stays; once this is mended, the same command "
              "resumes.", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
