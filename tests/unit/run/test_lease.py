"""The single-writer lease of a study (sweeper.run.lease): one driver per study, on a disk and in S3;
dead holders are taken over; end to end, a second driver is refused and a third takes over from
a killed first, and every planned trial is recorded exactly once."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from sweeper.run import lease as lease_module
from sweeper.run.lease import LeaseHeld, hold_lease, read_lease, take_lease
from sweeper.store import storage

from conftest import ROOT

HOST = socket.gethostname()


@pytest.fixture(params=["disk"])
def lease_at(request, tmp_path):
    """The lease location of a fresh study in a local folder (tests/e2e/test_lease_in_object_store.py
    runs the tests of a lease location in S3)."""
    return str(tmp_path / "study" / "lease.json")


def dead_pid() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(finished.stdout)
    assert not lease_module.pid_alive(pid)
    return pid


def plant(location: str, **fields) -> dict:
    """Another driver's lease (alive by default: this test's parent process, heartbeat now),
    written under the study folder's lock as another driver's `take_lease` writes it: unlocked,
    a heartbeat that had just read its own lease would write it back over the planted one."""
    now = time.time()
    holder = {"token": uuid.uuid4().hex, "host": HOST, "pid": os.getppid(), "since": now - 60,
              "heartbeat_at": now, **fields}
    storage.make_dirs(storage.parent(location))
    with lease_module._serialised(location):
        storage.write_json(location, holder)
    return holder


def test_a_fresh_study_is_taken_and_released(lease_at):
    lease = take_lease(lease_at)
    holder = read_lease(lease_at)
    assert holder == lease.record and holder["host"] == HOST and holder["pid"] == os.getpid()
    assert len(holder["token"]) == 32 and lease.took_over is None
    before = holder["heartbeat_at"]
    time.sleep(0.01)
    assert lease.renew() and read_lease(lease_at)["heartbeat_at"] > before
    lease.release()
    assert read_lease(lease_at) is None
    lease.release()  # twice is fine


def test_a_live_holder_is_refused_by_name(lease_at):
    holder = plant(lease_at)
    with pytest.raises(LeaseHeld) as refused:
        take_lease(lease_at)
    message = str(refused.value)
    assert f"host {HOST}, pid {os.getppid()}, since " in message and "last heartbeat" in message
    assert read_lease(lease_at) == holder, "the holder's lease is untouched"
    # A holder on another host whose heartbeat is recent is alive too (its pid cannot be checked).
    plant(lease_at, host="elsewhere", pid=1, heartbeat_at=time.time() - 60)
    with pytest.raises(LeaseHeld, match="host elsewhere, pid 1,"):
        take_lease(lease_at)


def test_one_process_holds_one_lease(lease_at):
    lease = take_lease(lease_at)
    with pytest.raises(LeaseHeld, match=f"pid {os.getpid()},"):
        take_lease(lease_at)
    lease.release()


def test_a_dead_holder_on_this_host_is_taken_over_at_once(lease_at):
    holder = plant(lease_at, pid=dead_pid())
    lease = take_lease(lease_at)
    assert lease.took_over == holder and lease.took_over_because == "its process is gone"
    assert read_lease(lease_at)["token"] == lease.token
    lease.release()


def test_a_silent_holder_is_taken_over_after_the_stale_threshold(lease_at):
    holder = plant(lease_at, host="elsewhere", pid=1, heartbeat_at=time.time() - lease_module.STALE_AFTER_S - 5)
    lease = take_lease(lease_at)
    assert lease.took_over == holder and lease.took_over_because.startswith("no heartbeat for 12")
    lease.release()
    # The same holds for a live pid on this host that stopped beating (hung, suspended).
    plant(lease_at, heartbeat_at=time.time() - 500)
    take_lease(lease_at).release()


def test_release_and_renew_touch_only_our_own_lease(lease_at):
    lease = take_lease(lease_at)
    successor = plant(lease_at, pid=os.getppid())  # as if another driver had taken it over
    assert not lease.renew()
    assert read_lease(lease_at) == successor, "renew wrote nothing"
    lease.release()
    assert read_lease(lease_at) == successor, "release removed another driver's lease"


def test_a_driver_that_lost_its_lease_is_told(tmp_path):
    location = str(tmp_path / "lease.json")
    lease = take_lease(location)
    lost = threading.Event()
    told = []
    lease.start_heartbeat(interval_s=0.05, on_lost=lambda lease_, holder: (told.append(holder), lost.set()))
    time.sleep(0.2)
    assert not lost.is_set(), "renewals of our own lease go on"
    successor = plant(location)
    assert lost.wait(5) and told == [successor]
    lease.release()
    assert read_lease(location) == successor


HOLDER = """
import sys, time
from sweeper.run.lease import hold_lease
hold_lease(sys.argv[1], heartbeat_s=0.1)
print("held", flush=True)
if sys.argv[2] == "raise":
    raise SystemError("the driver fails")
time.sleep(60)
"""


@pytest.mark.parametrize("ending", ["lost", "raise"])
def test_a_driver_process_stops_when_its_lease_is_taken_and_releases_on_errors(tmp_path, ending):
    location = str(tmp_path / "lease.json")
    driver = subprocess.Popen([sys.executable, "-c", HOLDER, location, ending], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert driver.stdout.readline().strip() == "held"
        if ending == "lost":
            successor = plant(location)  # another driver took it over, judging this one dead
        _, stderr = driver.communicate(timeout=60)
    finally:
        driver.kill()
    if ending == "lost":
        assert driver.returncode == 4, stderr
        assert f"lost the lease of {tmp_path} to host {HOST}, pid {os.getppid()}" in stderr
        assert read_lease(location) == successor, "the successor's lease stays"
    else:
        assert driver.returncode == 1 and "SystemError" in stderr
        assert read_lease(location) is None, "released at exit"


def test_hold_lease_says_it_took_over(tmp_path, capsys):
    location = str(tmp_path / "lease.json")
    pid = dead_pid()
    plant(location, pid=pid, heartbeat_at=time.time() - 30)
    lease = hold_lease(location)
    try:
        out = capsys.readouterr().out
        assert f"[study] took over the lease of {HOST}/{pid}, stale since " in out
        assert "(its process is gone)" in out
    finally:
        lease.release()
    assert read_lease(location) is None


def test_an_unreadable_lease_file_is_stale_only_once_old(tmp_path, monkeypatch):
    monkeypatch.setattr(lease_module, "UNREADABLE_PATIENCE_S", 0.2)
    location = tmp_path / "lease.json"
    location.write_text("")  # a create caught mid-write, or a damaged file
    with pytest.raises(LeaseHeld, match="an unreadable lease file"):
        take_lease(str(location))
    old = time.time() - lease_module.STALE_AFTER_S - 5
    os.utime(location, (old, old))
    lease = take_lease(str(location))
    assert lease.took_over["unreadable"]
    lease.release()


@pytest.mark.parametrize("stale", [False, True], ids=["fresh", "take-over"])
def test_racing_takers_on_a_disk_get_one_lease(tmp_path, stale):
    """Eight takers at once (threads: each its own file descriptors, as separate processes would
    have): exactly one gets the lease, whether it is new or taken over from a dead holder."""
    location = str(tmp_path / "lease.json")
    if stale:
        plant(location, pid=dead_pid())
    start, won, refused = threading.Barrier(8), [], []

    def take():
        start.wait()
        try:
            won.append(take_lease(location))
        except LeaseHeld as error:
            refused.append(error)
    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(refused) == 7
    assert read_lease(location)["token"] == won[0].token
    assert all(error.holder["token"] == won[0].token for error in refused)
    won[0].release()



# The e2e case (a second driver refused, a third taking over from a SIGKILLed first, 0 lost and
# 0 duplicated trials) runs inside tests/e2e/test_resume.py's driver-kill test, which kills a driver anyway.
