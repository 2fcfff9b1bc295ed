"""The watcher's tests judge what a record says, so each waits for the record past the status
answer's 4 s bound (tests/conftest.py's Patience): on a starved machine the fake box's answer
took past it, the tick read the box as not answering, and a milestone test found none (the busy
fast lane). The bound is proven where it is the claim: tests/bot/verbs/test_status_answer.py, and
test_train_answers.py, which restores it (``patient.bounded()``)."""

import pytest


@pytest.fixture(autouse=True)
def _patient(patient):
    return patient
