# SPDX-License-Identifier: GPL-2.0
"""Runs rdma-core's own pyverbs test suite (Debian ships it gzip-compressed in
/usr/share/doc/rdma-core/tests) against one device and prints each test's outcome as
JSON: {"test id": "pass" | "fail" | "error" | "skip"}.

Usage: rdma_core_suite.py DIR DEV [TEST_ID ...], where DIR is a writable copy of the
suite with its files uncompressed; with test ids, only those run. The suite's own run_tests.py prints only unittest's text; this
driver does what it does (its argument parser first, then every test of the package)
with a result object that keeps the outcome per test.
"""
import json
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader


class Outcomes(unittest.TestResult):
    """Keeps "pass", "fail", "error" or "skip" per test id."""

    def __init__(self):
        super().__init__()
        self.outcome = {}

    def addSuccess(self, test):
        self.outcome[test.id()] = "pass"

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcome[test.id()] = "fail"

    def addError(self, test, err):
        super().addError(test, err)
        self.outcome[test.id()] = "error"

    def addSkip(self, test, reason):
        self.outcome[test.id()] = "skip"

    def addExpectedFailure(self, test, err):
        self.outcome[test.id()] = "pass"

    def addUnexpectedSuccess(self, test):
        self.outcome[test.id()] = "fail"


def main():
    top, dev, only = sys.argv[1], sys.argv[2], sys.argv[3:]
    sys.path.insert(0, os.path.join(top, "tests"))
    sys.argv = ["run_tests.py", "--dev", dev, "--gid", "0"]
    from args_parser import parser  # the suite's; its tests read the parsed arguments
    parser.parse_args()
    tests = SourceFileLoader("tests", os.path.join(top, "tests", "__init__.py")).load_module()
    loader = unittest.defaultTestLoader
    suite = loader.loadTestsFromNames(only) if only else loader.loadTestsFromModule(tests)
    result = Outcomes()
    suite.run(result)
    for test, trace in result.failures + result.errors:
        print(f"--- {test.id()}\n{trace}", file=sys.stderr)
    print(json.dumps(result.outcome, sort_keys=True))


if __name__ == "__main__":
    main()
