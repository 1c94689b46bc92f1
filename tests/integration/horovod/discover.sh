#!/bin/sh
# Horovod's --host-discovery-script in the test's launcher: the operator's discover_hosts.sh, less the hosts
# whose names do not resolve yet. The testbed has no cluster DNS; the test writes each worker's pod IP into the
# launcher's /etc/hosts (what a headless Service's records would give), so a new worker is offered to Horovod
# only once ssh can reach it.
date +%s.%N >> /tmp/discovery-runs
out="$(sh /etc/mpi/discover_hosts.sh --explain 2>/tmp/explain)" || { cat /tmp/explain >&2; exit 1; }
# Only host:slots lines, and a name counts as resolvable when /etc/hosts has it (never a DNS query: the
# testbed has no DNS server and each lookup would wait for its timeout, stalling Horovod's discovery thread).
hosts="$(for line in $out; do
  case "$line" in *:[0-9]*) ;; *) continue ;; esac
  awk -v n="${line%%:*}" '{ for (i = 2; i <= NF; i++) if ($i == n) found = 1 } END { exit !found }' /etc/hosts \
    && echo "$line"
done)"
# Each change of the list, on stderr (the launcher's log), for the test's post-mortem.
[ "$hosts" = "$(cat /tmp/discovered 2>/dev/null)" ] || { echo "$hosts" > /tmp/discovered; echo "DISCOVERED $(date +%s.%N):" $hosts "($(grep source: /tmp/explain))" >&2; }
[ -z "$hosts" ] || echo "$hosts"
exit 0
