"""Driver side of the sweeper, in stages (each package's docstring says what it owns):

    cli ─► run ─► design ─► report ─► plan ─► spec ─► contract ─► store

a stage imports only the stages to its right (tests/unit/test_architecture.py checks it); `cli.py`
and `__main__.py` sit on top. Never imports torch: the worker side (`trainables`) runs inside
Ray tasks and trials, and imports only the torch- and Ray-free `contract` and `store` stages.
The stages and every module, in one place: docs/architecture.md.
"""
__version__ = "0.1.0"


def results(study, every: bool = False):
    """The result rows the study's report used (one per trial key, with their `standing`), as a
    pandas DataFrame; `every=True`: every recorded row, superseded ones included. `study`: the
    study folder or URI, its name under ./studies/, or its spec file (as `sweeper status` takes
    it). docs/results.md says which rows and why."""
    from sweeper.cli import study_results  # on call: `import sweeper` (the worker side's) stays light

    return study_results(study, every)
