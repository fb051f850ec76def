"""Driver side of the sweeper: spec, plan, scheduling on Ray, results store, report, CLI.

Never imports torch: the worker side (`trainables`) runs inside Ray tasks and trials.
"""
__version__ = "0.1.0"
