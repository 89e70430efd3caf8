"""The evaluation's worker part: compute a job's metrics off the training thread and hand the outcomes back in
the order the jobs were taken.

:class:`MetricWorker` runs ``compute(job)`` (numpy only, no model) in one background thread, or on the calling
thread with ``background=False``. :meth:`MetricWorker.collect` returns the finished outcomes, oldest first, and
stops at the first unfinished one unless told to wait; a job that failed raises
:class:`~disentangle.callbacks.gather.EvaluationError` there, on the caller's (training) thread.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from .gather import EvaluationError, failure
from .jobs import EvaluationJob, EvaluationOutcome


class MetricWorker:
    """One worker thread (``background``) or none, and the queue of jobs it has not handed back yet."""

    def __init__(self, compute: Callable[[EvaluationJob], EvaluationOutcome], background: bool = True):
        self.compute = compute
        self.background = bool(background)
        self.executor: ThreadPoolExecutor | None = None
        self.pending: deque[tuple[int, Future]] = deque()

    def __getstate__(self):  # threads and futures do not pickle (ddp_spawn, deepcopy)
        state = dict(self.__dict__)
        state["executor"], state["pending"] = None, deque()
        return state

    @property
    def idle(self) -> bool:
        """No thread running and nothing pending."""
        return self.executor is None and not self.pending

    def submit(self, job: EvaluationJob) -> None:
        if self.background:
            if self.executor is None:
                self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="disentangle-eval")
            future = self.executor.submit(self.compute, job)
        else:
            try:
                outcome = self.compute(job)
            except Exception as exc:
                raise failure(job.step, exc) from exc
            future = Future()
            future.set_result(outcome)
        self.pending.append((job.step, future))

    def collect(self, *, wait: bool) -> Iterator[EvaluationOutcome]:
        """Finished outcomes in the order their jobs were taken; with ``wait``, all of them. A failed job raises
        :class:`EvaluationError` (naming its step) when its turn comes."""
        while self.pending:
            step, future = self.pending[0]
            if not wait and not future.done():
                return
            self.pending.popleft()
            try:
                outcome = future.result()
            except Exception as exc:
                raise failure(step, exc, where=" in the background worker" if self.background else "") from exc
            yield outcome

    def drain(self, record: Callable[[EvaluationOutcome], None]) -> list[EvaluationError]:
        """Wait for every pending job and ``record`` each outcome, going on past failures; returns the failures."""
        errors = []
        while self.pending:
            try:
                for outcome in self.collect(wait=True):
                    record(outcome)
            except EvaluationError as exc:
                errors.append(exc)
        return errors

    def shutdown(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True)
            self.executor = None
