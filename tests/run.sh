#!/usr/bin/env bash
# Runs the suite. A process that ran the Temporal dev server can abort at interpreter exit with
# code 134 (temporalio/sdk-python#300) after every test has passed; that is read from the JUnit
# report, so a real failure still fails and a green suite is not reported red.
set -u
cd "$(dirname "$0")/.."
mkdir -p test-artifacts
report=test-artifacts/junit.xml
rm -f "$report"
select=()
# The real-model tests need llama-server (`make llama-server` builds it). They run in CI
# (CI=true) and with ERRANDS_REAL_MODEL=1; ERRANDS_REAL_MODEL=0 leaves them out.
default=0
if [ "${CI:-}" = true ]; then default=1; fi
if [ "${ERRANDS_REAL_MODEL:-$default}" = 0 ]; then
  select=(-m "not real_model")
fi
.venv/bin/python -m pytest -q -p no:cacheprovider --junitxml="$report" ${select[@]+"${select[@]}"} "$@"
rc=$?
if [ "$rc" -eq 134 ] && [ -f "$report" ]; then
  verdict=$(.venv/bin/python - "$report" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
tests = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
print("green" if tests > 0 and bad == 0 else "red")
PY
)
  if [ "$verdict" = green ]; then
    echo "pytest passed; the interpreter aborted at exit (sdk-python#300), ignored"
    rc=0
  fi
fi
exit "$rc"
