"""Finding a worker's storage error again in what the driver receives (sweeper.store.permanent_errors):
the worker's one line through Ray's wrapping (a task's RayTaskError, pickled as Ray sends it; Ray
Train's WorkerGroupError), a library's full-disk error named as ENOSPC, any other error left alone."""
from __future__ import annotations

import errno
import os
import pickle
import traceback

from ray.exceptions import RayTaskError
from ray.train import ControllerError, WorkerGroupError
from ray_private import worker_exception

from sweeper.store.permanent_errors import PermanentStorageError, cause_line, location_line

FULL = "/study/pretraining/r/step-20: no space left on the device (errno ENOSPC)"


def raised_in_a_task(error: Exception) -> Exception:
    """`error` as `ray.get` raises it in the driver: wrapped by Ray in the worker, pickled there,
    and raised as an instance of its cause's class."""
    try:
        raise error
    except Exception as caught:
        wrapped = RayTaskError("fit_run", "".join(traceback.format_exception(caught)), caught)
    return pickle.loads(pickle.dumps(wrapped)).as_instanceof_cause()


def worker_error() -> PermanentStorageError:
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as error:
            raise PermanentStorageError(FULL) from error
    except PermanentStorageError as error:
        return error


def test_the_workers_line_comes_through_rays_wrapping():
    assert cause_line(raised_in_a_task(worker_error())) == FULL
    group = WorkerGroupError("rank 0 failed", {0: worker_error()})
    assert cause_line(raised_in_a_task(group)) == FULL
    # What Ray Train 2.60 puts there: the worker's error with its traceback, printed as that text.
    error = worker_error()
    text = "".join(traceback.format_exception(error))
    assert cause_line(raised_in_a_task(WorkerGroupError("rank 0 failed", {0: worker_exception(error, text)})
                                       )) == FULL
    assert cause_line(ControllerError(worker_error())) == FULL


def test_an_oserror_of_a_full_disk_is_named_by_its_file_and_other_errors_are_none():
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/study/pretraining/r/progress.json")
    assert cause_line(raised_in_a_task(full)) == "/study/pretraining/r/progress.json: no space left on the device " \
                                                  "(errno ENOSPC)"
    assert cause_line(raised_in_a_task(ValueError("a bug"))) is None
    assert cause_line(raised_in_a_task(FileNotFoundError(errno.ENOENT, "missing", "/x"))) is None


def test_a_librarys_full_disk_error_is_named_by_the_folder_being_written():
    rust = RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
                        'left on device" })')
    assert location_line(rust, "/c/step-20") == "/c/step-20: no space left on the device (errno ENOSPC)"
    assert location_line(worker_error(), "/elsewhere") == FULL, "the innermost writer's line stays"
    assert location_line(RuntimeError("shape mismatch"), "/c/step-20") is None
