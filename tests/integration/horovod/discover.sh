#!/bin/sh
# Horovod's --host-discovery-script in the test's launcher: the operator's discover_hosts.sh, less the hosts
# whose names do not resolve yet. The testbed has no cluster DNS; the test writes each worker's pod IP into the
# launcher's /etc/hosts (what a headless Service's records would give), so a new worker is offered to Horovod
# only once ssh can reach it.
out="$(sh /etc/mpi/discover_hosts.sh)" || exit $?
for line in $out; do
  getent hosts "${line%%:*}" >/dev/null && echo "$line"
done
exit 0
