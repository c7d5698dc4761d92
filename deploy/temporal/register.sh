#!/bin/sh
# Waits for the Temporal server, makes sure the namespace exists, and registers Marathon's
# search attributes (the same list as workflows/search_attributes.py; a test keeps them equal).
set -eu
address=${TEMPORAL_ADDRESS:-temporal:7233}
namespace=${TEMPORAL_NAMESPACE:-default}

tries=0
until temporal operator cluster health --address "$address"; do
  tries=$((tries + 1))
  [ "$tries" -ge 30 ] && { echo "Temporal at $address is not healthy" >&2; exit 1; }
  sleep 2
done

temporal operator namespace describe -n "$namespace" --address "$address" >/dev/null 2>&1 \
  || temporal operator namespace create -n "$namespace" --address "$address"

existing=$(temporal operator search-attribute list -n "$namespace" --address "$address")
for pair in MarathonProblem=Keyword MarathonIteration=Int MarathonBestSpeedup=Double MarathonGoal=Keyword MarathonStatus=Keyword; do
  name=${pair%%=*}
  kind=${pair##*=}
  if echo "$existing" | grep -qw "$name"; then
    echo "search attribute $name already registered"
  else
    temporal operator search-attribute create -n "$namespace" --address "$address" --name "$name" --type "$kind"
  fi
done
