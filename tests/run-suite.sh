#!/usr/bin/env bash
# The whole pytest suite (`make test`) as two pytest processes side by side:
#   real nodes  the `realnode` modules, in this terminal: one real-node testbed at a time (they change host-wide
#               state: /var/lib/kubelet, the bridge, cgroups), mostly waiting on containers and training;
#   the rest    every other test (kwok testbeds in their own state directories, unit tests), logged to a file
#               and printed when both are done.
# Side by side the suite takes the time of its real-node half (docs/results.md, "Whole-suite runs"). What both
# halves use is built first, one build at a time (each is cached by its inputs): two cold builds of the same
# cache entry would race. Exit status: non-zero when either half failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
bin=.venv/bin
logs="$(mktemp -d)"
args=(-q -p no:cacheprovider --durations=20)

echo "[suite] shared builds: the reference operator, the MPI images (cached; log $logs/builds.log)"
{
  bash bench/reference/build.sh
  bash testbed/build-mpi-images.sh "$logs/mpi-images"
} >"$logs/builds.log" 2>&1 || echo "[suite] a shared build failed; the tests that need it say why (log $logs/builds.log)"

echo "[suite] the rest (kwok testbeds, unit tests) runs beside this; its output: $logs/rest.log"
"$bin/pytest" tests -m "not realnode and not sidebyside" "${args[@]}" >"$logs/rest.log" 2>&1 &
rest=$!
trap 'kill "$rest" 2>/dev/null' INT TERM

echo "[suite] real-node tests:"
"$bin/pytest" tests -m "realnode and not sidebyside" "${args[@]}"
real_status=$?

wait "$rest"
rest_status=$?
echo
echo "[suite] the rest (exit $rest_status):"
cat "$logs/rest.log"
echo "[suite] real-node tests: exit $real_status; the rest: exit $rest_status"
[[ $real_status == 0 && $rest_status == 0 ]]
