"""The cleanup stack under signals: a teardown is never cut short, and an interrupt that arrives
during one is never lost (CI once waited minutes for a SIGTERM swallowed by a verification's
teardown)."""
from __future__ import annotations

import os
import signal

import pytest

from longhaul.hardware.cleanup import CleanupStack, Interrupted, signals_raise


def test_a_signal_during_a_teardown_is_delivered_after_it():
    done = []
    with signals_raise():
        stack = CleanupStack()
        stack.push("second", lambda: done.append("second"))
        stack.push("first, interrupted", lambda: (os.kill(os.getpid(), signal.SIGTERM), done.append("first")))
        with pytest.raises(Interrupted):
            stack.close()
    assert done == ["first", "second"]            # every step ran before the interrupt


def test_a_signal_during_the_teardown_of_an_interrupt_only_waits():
    done = []
    with signals_raise():
        with pytest.raises(Interrupted) as info:
            try:
                raise Interrupted(signal.SIGINT)
            finally:
                stack = CleanupStack()
                stack.push("step", lambda: (os.kill(os.getpid(), signal.SIGTERM), done.append("step")))
                stack.close()                      # the run is ending anyway: noted, not raised again
    assert done == ["step"] and info.value.signum == signal.SIGINT
