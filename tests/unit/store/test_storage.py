"""Study storage: the same operations on a local folder and on a real S3 endpoint (moto's server
on the loopback), and the results store written to and read back from the object store."""
from __future__ import annotations

from pathlib import Path

import pytest
from cli_process import sweeper_cli

from sweeper.store import folders, storage
from sweeper.store.layout import CHECKPOINT_MARKER, TRAINING_STATE, RunLayout

from conftest import ROOT


@pytest.fixture(params=["local"])
def location(request, tmp_path) -> str:
    """A folder (tests/e2e/test_object_store.py runs the tests of a location on an s3:// one)."""
    return str(tmp_path / "study")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEPER_CACHE", str(tmp_path / "cache"))


def test_files_round_trip_and_listing(location):
    assert not storage.exists(storage.join(location, "a.json"))
    assert storage.read_json(storage.join(location, "a.json"), default={"none": 1}) == {"none": 1}
    storage.write_json(storage.join(location, "a.json"), {"x": 1})
    storage.write_json(storage.join(location, "a.json"), {"x": 2})  # replaced whole
    assert storage.read_json(storage.join(location, "a.json")) == {"x": 2}
    for step in (10, 20):
        storage.write_text(storage.join(location, "run", f"step-{step}", "marker.json"), str(step))
    storage.write_text(storage.join(location, "run", "tmp-1", "marker.json"), "stray")
    found = storage.find_files(storage.join(location, "run"), "step-*/marker.json")
    assert [storage.read_text(f) for f in found] == ["10", "20"]
    assert storage.list_names(storage.join(location, "run"), folders=True) == ["step-10", "step-20", "tmp-1"]
    assert storage.list_names(location, folders=False) == ["a.json"]
    assert storage.list_names(storage.join(location, "missing")) == []
    storage.remove(storage.join(location, "a.json"))
    storage.remove(storage.join(location, "a.json"))  # missing is fine
    assert not storage.exists(storage.join(location, "a.json"))
    folders.move_tree(storage.join(location, "run"), storage.join(location, "old-run"))
    assert storage.list_names(storage.join(location, "old-run"), folders=True) == ["step-10", "step-20", "tmp-1"]
    assert not storage.list_names(storage.join(location, "run"))
    storage.remove_tree(storage.join(location, "old-run"))
    assert not storage.exists(storage.join(location, "old-run", "step-10", "marker.json"))


def test_a_run_resumes_from_its_newest_checkpoint_whose_listed_files_all_arrived(location):
    """Ray Train uploads a worker group's checkpoint file by file in no set order, so a marker
    can arrive before the files it lists (an upload killed midway). Such a folder, and one whose
    training state was dropped (an older evaluated checkpoint), is no resume point."""
    run = RunLayout(storage.join(location, "run"))

    def checkpoint(step: int, files: dict[str, bytes], listed: dict[str, int] | None) -> None:
        for name, data in files.items():
            storage.write_bytes(storage.join(run.checkpoint(step), name), data)
        marker = {"step": step} | ({"files": listed} if listed is not None else {})
        storage.write_json(storage.join(run.checkpoint(step), CHECKPOINT_MARKER), marker)

    whole = {"model.safetensors": b"w" * 300, TRAINING_STATE: b"s" * 50, "tok/vocab.json": b"{}"}
    sizes = {name: len(data) for name, data in whole.items()}
    assert run.latest_resumable() is None
    checkpoint(10, whole, sizes)
    checkpoint(20, whole, None)  # published in one piece before markers listed their files
    checkpoint(30, {n: d for n, d in whole.items() if n != TRAINING_STATE}, sizes)  # stripped
    assert run.latest_resumable() == (20, run.checkpoint(20))
    checkpoint(40, {**whole, "model.safetensors": b"w" * 100}, sizes)  # weights half uploaded
    checkpoint(50, {n: d for n, d in whole.items() if n != "tok/vocab.json"}, sizes)  # a file missing
    assert run.latest_resumable() == (20, run.checkpoint(20))
    # What the driver asks before fine-tuning a worker group's newest checkpoint.
    assert [run.files_arrived(run.checkpoint(step)) for step in (10, 20, 30, 40, 50)] \
        == [True, None, False, False, False]
    assert run.latest_resumable(newer_than=20) is None, "Ray's checkpoint at 20 is as new"
    checkpoint(60, whole, sizes)
    assert run.latest_resumable(newer_than=20) == (60, run.checkpoint(60))
    marker = storage.read_bytes(storage.join(run.checkpoint(60), CHECKPOINT_MARKER))
    assert storage.file_sizes(run.checkpoint(60)) == {**sizes, CHECKPOINT_MARKER: len(marker)}
    assert storage.file_sizes(storage.join(location, "missing")) == {}


def build_folder(folder: Path, version: str = "1") -> None:
    (folder / "sub").mkdir()
    (folder / "sub" / "weights.bin").write_bytes(b"\0" * 1000 + version.encode())
    (folder / "config.json").write_text("{}")
    (folder / "marker.json").write_text(version)


def test_build_once_publishes_a_whole_folder_that_local_copy_reads(location, tmp_path):
    calls = []

    def build(folder: Path) -> None:
        calls.append(folder)
        build_folder(folder)

    target = storage.join(location, "cache", "corpus")
    folders.build_once(target, "marker.json", build)
    folders.build_once(target, "marker.json", build)
    assert len(calls) == 1, "a finished folder is reused"
    copy = folders.local_copy(target, "marker.json")
    assert (copy / "sub" / "weights.bin").read_bytes().endswith(b"1")
    sub = folders.local_copy(target, "marker.json", only="sub")
    assert sub.name.endswith("sub") and sorted(p.name for p in sub.iterdir()) == ["weights.bin"]
    if storage.is_remote(target):
        assert str(copy).startswith(str(tmp_path / "cache")), "remote folders are copied into the node's cache"
        light = folders.local_copy(target, "marker.json", skip=("weights.bin",))
        assert light != copy and sorted(p.name for p in light.rglob("*") if p.is_file()) == [
            "config.json",
            "marker.json",
        ]
        # Published again with other content (a recomputed run): the new marker means a new copy.
        local = tmp_path / "v2"
        local.mkdir()
        build_folder(local, "2")
        folders.publish_tree(local, target, "marker.json")
        assert not local.exists()
        again = folders.local_copy(target, "marker.json")
        assert again != copy and (again / "sub" / "weights.bin").read_bytes().endswith(b"2")
        with pytest.raises(FileNotFoundError):
            folders.local_copy(storage.join(location, "nothing-here"), "marker.json")
    else:
        assert copy == Path(target), "a local folder is read where it is"


def test_locations_join_display_and_validate():
    uri = "s3://key:secret@bucket/studies/x?endpoint_override=127.0.0.1:9000&scheme=http"
    assert storage.join(uri, "results", "trials") == \
        "s3://key:secret@bucket/studies/x/results/trials?endpoint_override=127.0.0.1:9000&scheme=http"
    assert storage.parent(storage.join(uri, "a")) == uri and storage.name(storage.join(uri, "a")) == "a"
    assert storage.display(uri) == "s3://bucket/studies/x", "credentials and query never printed"
    assert storage.normalize("file:///tmp/x/../y") == "/tmp/y"
    assert storage.normalize("gs://bucket/x") == "gs://bucket/x"
    assert storage.scheme_error("gs://bucket/x") is None and storage.scheme_error("/local/path") is None
    assert "unsupported storage scheme 'ftp'" in storage.scheme_error("ftp://host/x")


def test_a_bad_storage_flag_exits_2_before_anything_starts(tmp_path):
    result = sweeper_cli("run", "search_spaces/smoke.yaml", "--storage", "ftp://host/study", cwd=ROOT)
    assert result.returncode == 2
    assert "--storage: unsupported storage scheme 'ftp'" in result.stderr
    assert "[study]" not in result.stdout
