"""Run onnxruntime's own Python API tests against onnx-ep's compatibility module.

Downloads nothing: point it at a checkout of onnxruntime (its test file and test data are
read in place, never copied here), or at a folder (or the file) holding
``onnxruntime_test_python.py`` with its ``helper.py`` and ``testdata`` beside it::

    git clone --depth 1 https://github.com/microsoft/onnxruntime /tmp/ort
    python scripts/run_ort_api_tests.py /tmp/ort [-k test_run_model] [--json results.json]

It calls ``onnx_ep.onnxruntime.install()`` before the test file is imported, so its
``import onnxruntime`` gets onnx-ep (checked: ``onnxruntime.__file__`` is in onnx_ep), runs
the file with unittest from its own folder (where its ``helper.get_name`` finds
``testdata``), prints one line per test and a summary, and exits 1 when a test fails.
``--baseline`` runs the same file against the installed onnxruntime instead, for the list
to compare with. docs/ONNXRUNTIME.md says which tests are expected to fail, and why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import unittest
from pathlib import Path

TEST_FILE = Path("onnxruntime/test/python/onnxruntime_test_python.py")


def _tests(suite: unittest.TestSuite) -> list[unittest.TestCase]:
    out: list[unittest.TestCase] = []
    for t in suite:
        out.extend(_tests(t) if isinstance(t, unittest.TestSuite) else [t])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", type=Path, help="root of an onnxruntime checkout, or the "
                    "test file or its folder")
    ap.add_argument("-k", default="", help="run only tests whose name contains this")
    ap.add_argument("--json", type=Path, help="write {test: outcome} here")
    ap.add_argument("--baseline", action="store_true",
                    help="run against the installed onnxruntime (no install())")
    args = ap.parse_args(argv)
    candidates = [args.checkout / TEST_FILE, args.checkout / TEST_FILE.name, args.checkout]
    test_file = next((c.resolve() for c in candidates if c.is_file()), None)
    if test_file is None:
        ap.error(f"no {TEST_FILE.name} at {args.checkout}: pass the root of an onnxruntime "
                 f"checkout, or the test file or its folder")

    if not args.baseline:
        import onnx_ep.onnxruntime

        if not onnx_ep.onnxruntime.install():
            print("a real onnxruntime is imported in this process already", file=sys.stderr)
            return 2
    import onnxruntime

    if ("onnx_ep" in Path(onnxruntime.__file__).parts) == args.baseline:
        print(f"onnxruntime is {onnxruntime.__file__}: not what was asked", file=sys.stderr)
        return 2
    print(f"onnxruntime {onnxruntime.__version__} from {onnxruntime.__file__}")
    os.chdir(test_file.parent)
    sys.path.insert(0, str(test_file.parent))
    module = __import__(test_file.stem)
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    outcomes: dict[str, str] = {}
    for test in _tests(suite):
        name = test.id().rsplit(".", 1)[-1]
        if args.k and args.k not in name:
            continue
        result = unittest.TestResult()
        test.run(result)
        if result.errors or result.failures:
            outcomes[name] = "failed"
            detail = (result.errors or result.failures)[0][1].strip().splitlines()[-1]
            print(f"FAIL {name}: {detail}")
        elif result.skipped:
            outcomes[name] = "skipped"
            print(f"skip {name}: {result.skipped[0][1]}")
        else:
            outcomes[name] = "passed"
            print(f"ok   {name}")
    counts = {o: sum(1 for v in outcomes.values() if v == o)
              for o in ("passed", "failed", "skipped")}
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
          f"of {len(outcomes)}")
    if args.json:
        args.json.write_text(json.dumps(outcomes, indent=1, sort_keys=True))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
