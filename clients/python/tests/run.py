"""The test runner of t/041_client_python.pl: runs the unit and the
integration tests and prints one line per test,

    RESULT ok <test id>
    RESULT not ok <test id>
    RESULT skip <test id> # <reason>

with the failures' tracebacks on stderr; exit status 0 when all passed.

    python3 tests/run.py [pattern ...]     (default: test_unit test_integration)
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class Result(unittest.TextTestResult):
    def _line(self, what, test, extra=""):
        print("RESULT %s %s%s" % (what, test.id(), extra), flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line("ok", test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line("not ok", test)

    def addError(self, test, err):
        super().addError(test, err)
        self._line("not ok", test)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line("skip", test, " # " + reason)


def main():
    names = sys.argv[1:] or ["test_unit", "test_integration"]
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromName(n) for n in names)
    runner = unittest.TextTestRunner(stream=sys.stderr, resultclass=Result, verbosity=0)
    r = runner.run(suite)
    sys.exit(0 if r.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
