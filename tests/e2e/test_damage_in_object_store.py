"""A damaged part in moto's S3 server: split from tests/unit/store/test_damage.py."""
from __future__ import annotations



from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, quarantined, read_trials, write_rows


from test_damage import CLS, SMOKE, rows_for


def test_a_damaged_part_in_an_object_store_is_set_aside_there(object_store, monkeypatch, tmp_path):
    monkeypatch.setenv("SWEEPER_CACHE", str(tmp_path / "cache"))
    study = StudyLayout(object_store("damage/study"))
    plan = plan_study(load_study(SMOKE).spec)
    write_rows(study, TRIALS, rows_for([t for t in plan.trials if t.seed == 0], "smoke"))
    bad = write_rows(study, TRIALS, rows_for([t for t in plan.trials if t.seed == 1 and t.task.endswith("cls")],
                                             "smoke"))[0]
    storage.write_bytes(bad, b"")
    assert read_trials(study).num_rows == 20
    (note,) = quarantined(study)
    assert note["file"] == f"results/trials/{CLS}/{storage.name(bad)}" and "size is 0" in note["reason"]
    assert not storage.exists(bad)
    assert storage.exists(storage.join(study.quarantine, "trials", CLS, storage.name(bad)))
