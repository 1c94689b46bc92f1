#!/bin/sh
# Horovod's --host-discovery-script in the test's launcher: the operator's discover_hosts.sh as it is (it holds
# back names cluster DNS does not resolve to their pods yet), plus a record of each run and of each change of
# the list for the test's post-mortem and figures.
date +%s.%N >> /tmp/discovery-runs
hosts="$(sh /etc/mpi/discover_hosts.sh --explain 2>/tmp/explain)" || { cat /tmp/explain >&2; exit 1; }
# Each change of the list, on stderr (the launcher's log), with what the script held back and why.
[ "$hosts" = "$(cat /tmp/discovered 2>/dev/null)" ] || { echo "$hosts" > /tmp/discovered; echo "DISCOVERED $(date +%s.%N):" $hosts "($(grep -e source: -e 'held back' /tmp/explain | tr '\n' ' '))" >&2; }
# Each change of what the script holds back and why (the list itself may not change while a name is held).
held="$(grep 'held back' /tmp/explain | tr '\n' ' ')"
[ "$held" = "$(cat /tmp/held 2>/dev/null)" ] || { echo "$held" > /tmp/held; echo "HELD $(date +%s.%N): $held" >&2; }
[ -z "$hosts" ] || echo "$hosts"
exit 0
