# SPDX-License-Identifier: GPL-2.0
"""rsiw's in-kernel KUnit suites (built only when CONFIG_KUNIT=y, as in the debug kernel):
they run when the module loads and report in KTAP through dmesg."""
import os
import re

import pytest

from conftest import dmesg_mark, dmesg_since, load_rsiw, unload_rsiw

SUITES = ["rsiw_crc32c", "rsiw_verbs", "rsiw_kverbs", "rsiw_iwcm"]


@pytest.mark.skipif(os.environ.get("RSIW_KERNEL") != "debug", reason="KUnit is built in only on the debug kernel")
def test_kunit_suites_pass():
    unload_rsiw()
    mark = dmesg_mark()
    load_rsiw()
    try:
        new = "\n".join(dmesg_since(mark))
        for suite in SUITES:
            assert re.search(rf"^\s*(\[[^\]]*\]\s*)?ok \d+ {suite}\s*$", new, re.M), (
                f"KUnit suite {suite} did not pass:\n{new}"
            )
        assert not re.search(r"not ok \d+", new), new
    finally:
        unload_rsiw()
