"""The CLI fork server (tests/support/cli_process.py) refuses a call whose HF_ variables differ
from its own once it has imported a module that read them at import."""
from __future__ import annotations

import sys
import types

from cli_process import READ_AT_IMPORT, read_at_import


def test_hf_variables_a_server_module_read_at_import_are_named_and_others_pass(monkeypatch):
    for module in READ_AT_IMPORT:
        monkeypatch.delitem(sys.modules, module, raising=False)
    assert read_at_import({"HF_HOME": "/call"}, {"HF_HOME": "/server"}) == []  # nothing read them yet
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.ModuleType("huggingface_hub"))
    assert read_at_import({"HF_HOME": "/call", "PATH": "/x"}, {"HF_HOME": "/server", "PATH": "/y"}) == ["HF_HOME"]
    assert read_at_import({"HF_HUB_OFFLINE": "1"}, {}) == ["HF_HUB_OFFLINE"]  # set by the call alone
    assert read_at_import({"HF_HOME": "/same"}, {"HF_HOME": "/same"}) == []
