"""The quick tier's guard in a test's child processes (`sweeper plan`, a `sweeper run` that must
refuse before starting anything, ...): tests/support/quick_tier.py puts this folder on
PYTHONPATH and names a log in SWEEPER_QUICK_TIER_LOG; what a child may not start (start_rules)
is refused there and written to that log, which fails the test."""
import os
import sys

if os.environ.get("SWEEPER_QUICK_TIER_LOG"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from start_rules import guard_process

    guard_process()
