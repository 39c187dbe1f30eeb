#!/usr/bin/env python3
"""check_shell_pipes.py finds a pipe into an early-stopping reader, and only that."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_shell_pipes  # noqa: E402

FOUND = [
    '''metric() { printf '%s\\n' "$1" | awk -v name="$2" 'index($0, name) == 1 { print $2; exit }'; }''',
    '''if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then''',
    '''url="http://127.0.0.1:$(grep -o "port [0-9]*" "$log" | grep -o "[0-9]*$" | head -n 1)/metrics"''',
    '''nm -DC lib.so | grep -v " dist::" | head''',
    '''kubectl get pods -o name |\n  grep -m1 demo''',
    '''seq 1 100000 | sed -n '5{p;q}' ''',
    '''cat big | grep --quiet x && echo yes''',
]
CLEAN = [
    '''metric() { awk -v name="$2" 'index($0, name) == 1 { print $2; exit }' <<<"$1"; }''',
    '''grep -q "^demo OK" <<<"$(tail -n 4 "$log")"''',
    '''grep -m 1 -o "port [0-9]*" "$log"''',
    '''ls | grep -c demo''',
    '''make demo 2>&1 | tee "$log"''',
    '''grep -o "step [0-9]*/$steps loss\\|resumed" "$log" | tail -n 1''',
    '''echo "a | head" || head -n 1 file''',
    '''awk '{ s += $1 } END { print s }' file | sed 's/^/  /' ''',
    '''printf 'x\\n' | head -n 1  # pipe-ok: one line, written before head reads''',
]


def findings(body, pipefail=True):
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
        f.write(("set -euo pipefail\n" if pipefail else "set -eu\n") + body + "\n")
    try:
        return check_shell_pipes.check(f.name)
    finally:
        os.unlink(f.name)


class CheckShellPipesTest(unittest.TestCase):
    def test_finds_each_early_reader(self):
        for body in FOUND:
            with self.subTest(body=body):
                self.assertEqual(len(findings(body)), 1, body)

    def test_passes_readers_of_strings_files_and_whole_streams(self):
        for body in CLEAN:
            with self.subTest(body=body):
                self.assertEqual(findings(body), [], body)

    def test_scripts_without_pipefail_are_not_held_to_it(self):
        self.assertEqual(findings(FOUND[0], pipefail=False), [])

    def test_names_the_line(self):
        self.assertIn(":3:", findings("echo\n" + FOUND[3])[0])


if __name__ == "__main__":
    unittest.main()
