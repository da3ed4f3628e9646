#!/usr/bin/env python3
"""Counts the individual tests behind `meson test`: each Criterion binary's
synthesis line, and one test for any other program. Prints one closing line,
'N passed, N failed, N skipped', and exits non-zero when anything failed.

  test-summary.py TESTLOG.JSON              the closing line
  test-summary.py --failures TESTLOG.JSON   each failed test's name and the
                                            end of its stderr (a CI log shows
                                            its own end; a sanitizer's report
                                            in a test's middle is cut)"""
import json
import re
import sys

SYNTHESIS = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| "
                       r"Failing: (\d+) \| Crashing: (\d+)")


TAIL = 30


def failures(path):
    with open(path, encoding="utf-8") as log:
        for line in log:
            t = json.loads(line)
            if t.get("result") in ("OK", "EXPECTEDFAIL", "SKIP"):
                continue
            err = (t.get("stderr") or "").splitlines()
            print(f"--- {t.get('name')}: {t.get('result')}, the last "
                  f"{min(TAIL, len(err))} of {len(err)} lines of stderr")
            for e in err[-TAIL:]:
                print("  " + e)
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--failures":
        return failures(sys.argv[2])
    passed = failed = skipped = 0
    with open(sys.argv[1], encoding="utf-8") as log:
        for line in log:
            t = json.loads(line)
            result = t.get("result")
            out = (t.get("stdout") or "") + (t.get("stderr") or "")
            found = SYNTHESIS.findall(out)
            if result == "SKIP":
                skipped += 1
            elif found:
                for tested, ok, failing, crashing in found:
                    passed += int(ok)
                    failed += int(failing) + int(crashing)
                    skipped += int(tested) - int(ok) - int(failing) - int(crashing)
                if result not in ("OK", "EXPECTEDFAIL") and not any(
                        int(f) + int(c) for _, _, f, c in found):
                    failed += 1
            elif result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            else:
                failed += 1
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


sys.exit(main())
