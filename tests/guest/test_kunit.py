# SPDX-License-Identifier: GPL-2.0
"""rsiw's in-kernel KUnit suites (built only when CONFIG_KUNIT=y, as in the debug kernel):
they run when the module loads and report in KTAP through dmesg. Only this test's load
runs them: conftest.py filters them out of every other load."""
import os
import re

import pytest

from conftest import KUNIT_NONE, dmesg_mark, dmesg_since, kunit_filter, load_rsiw, unload_rsiw

SUITES = ["rsiw_crc32c", "rsiw_verbs", "rsiw_kverbs", "rsiw_iwcm", "rsiw_copy_pages"]
VECTOR_CASE = "completion_handler_runs_on_the_vectors_cpu"
"""The case of rsiw_kverbs (rust/kverbs_test.rs) that arms a kernel CQ on each online CPU's
vector, completes a Send from its own thread and checks the CPU its completion handler
recorded: with two or more CPUs, the handler of all but one vector must have moved off the
completing CPU."""


@pytest.mark.skipif(os.environ.get("RSIW_KERNEL") != "debug", reason="KUnit is built in only on the debug kernel")
def test_kunit_suites_pass():
    assert os.cpu_count() >= 2, f"{VECTOR_CASE} needs two CPUs to mean anything"
    unload_rsiw()
    mark = dmesg_mark()
    # The other tests' loads run no suite (conftest.py).
    kunit_filter("rsiw_*")
    try:
        load_rsiw()
        new = "\n".join(dmesg_since(mark))
        for suite in SUITES:
            assert re.search(rf"^\s*(\[[^\]]*\]\s*)?ok \d+ {suite}\s*$", new, re.M), (
                f"KUnit suite {suite} did not pass:\n{new}"
            )
        assert not re.search(r"not ok \d+", new), new
        assert re.search(rf"^\s*(\[[^\]]*\]\s*)?ok \d+ {VECTOR_CASE}\s*$", new, re.M), new
        assert "rsiw_kverbs: check failed" not in new, new
    finally:
        kunit_filter(KUNIT_NONE)
        unload_rsiw()
