#!/usr/bin/env python3
"""Hang evidence's names, the Python side (launcher/python_probe/_cohort_probe.py) against
tests/fixtures/hang_evidence.json, which tests/common/hang_evidence_test.cc checks the C++ side
(common/hang_evidence.h) against: a name changed on one side only fails one of the two.

Usage: hang_evidence_test.py SOURCE_DIR
"""

import json
import os
import sys
import tempfile


def main():
    source_dir = sys.argv[1]
    with open(os.path.join(source_dir, "tests", "fixtures", "hang_evidence.json")) as f:
        fixture = json.load(f)
    sys.path.insert(0, os.path.join(source_dir, "launcher", "python_probe"))
    import _cohort_probe as probe  # noqa: E402

    failures = []

    def expect(what, got, want):
        if got != want:
            failures.append("%s: the hook has %r, the fixture %r" % (what, got, want))

    files = fixture["probe_files"]
    expect("status file", probe._STATUS, files["status"])
    expect("dump request file", probe._DUMP_REQUEST, files["dump_request"])
    expect("dumped file", probe._DUMPED, files["dumped"])
    expect("faulthandler file", probe._FAULTHANDLER, files["faulthandler"])
    expect("stacks file", probe._STACKS, fixture["evidence_files"]["stacks"])
    expect("torch flight recorder file", probe._TORCH_FLIGHT_RECORDER,
           fixture["evidence_files"]["torch_flight_recorder"])
    expect("status fields the sidecar reads", list(probe._STATUS_FIELDS_READ),
           fixture["status_fields_read"])

    # What the hook writes: a real probe's status.json, every field the sidecar reads in it.
    with tempfile.TemporaryDirectory() as directory:
        hook = probe._Probe(directory)
        hook._write_status(hook.monotonic())
        with open(os.path.join(directory, files["status"])) as f:
            status = json.load(f)
    missing = [field for field in fixture["status_fields_read"] if field not in status]
    if missing:
        failures.append("status.json lacks %s: %s" % (missing, sorted(status)))
    if abs(status["unix_ms"] / 1000 - hook.time()) > 60:
        failures.append("status.json's unix_ms is not now: %r" % status["unix_ms"])

    for failure in failures:
        print("FAIL: " + failure)
    if not failures:
        print("ok: the hook's hang evidence names match tests/fixtures/hang_evidence.json")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
