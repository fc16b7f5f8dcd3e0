#!/usr/bin/env bash
# Copy every carbonspan agent's hash chain out of the cluster, for `carbonspan verify` and
# `carbonspan aggregate` on the auditor's machine:
#
#   deploy/kubernetes/copy-archives.sh ./archives
#   carbonspan verify ./archives
#   carbonspan aggregate ./archives --from 2026-11-01 --to 2026-11-30 --org "ACME" --out report.json
#
# Each running agent pod streams its chain directory with tar through `kubectl exec` while it
# keeps running (window files only: not its write-ahead log, lock or a half-written .gz.tmp);
# the copy lands as DEST/<pod name>/. Needs kubectl with `pods/exec` in the namespace
# (NAMESPACE, default carbonspan) and tar in the image. A volume whose pod is not running
# (scaled down) is listed, not copied: see deploy/kubernetes/README.md.
set -euo pipefail

ns=${NAMESPACE:-carbonspan}
dest=${1:-archives}
root=/var/lib/carbonspan   # the archive volume's mountPath = [agent.archive] dir
selector=app.kubernetes.io/name=carbonspan,app.kubernetes.io/component=agent

mkdir -p "$dest"
pods=$(kubectl -n "$ns" get pods -l "$selector" --field-selector=status.phase=Running \
  -o jsonpath='{.items[*].metadata.name}')
for pod in $pods; do
  echo "copying $pod:$root/$pod -> $dest/$pod" >&2
  kubectl -n "$ns" exec "$pod" -c agent -- tar -C "$root" -cf - \
    --exclude=agent.wal --exclude=agent.wal.void --exclude=agent.lock --exclude='*.gz.tmp' "$pod" | tar -xf - -C "$dest"
  # A file compressed while tar ran can arrive twice (plain and .gz); the agent keeps the .gz
  # (it is renamed into place only once complete), so the copy does too.
  for gz in "$dest/$pod"/windows-*.jsonl.gz; do
    if [ -e "$gz" ]; then rm -f "${gz%.gz}"; fi
  done
  # The newest plain file may be caught in the middle of an append: say so rather than hand
  # the auditor a chain whose last line `verify` calls malformed.
  last=$(find "$dest/$pod" -maxdepth 1 -name 'windows-*.jsonl' | sort | tail -n 1)
  if [ -n "$last" ] && [ -s "$last" ] && [ "$(tail -c 1 "$last" | wc -l)" -eq 0 ]; then
    echo "warning: $last ends in a line being written; copy again" >&2
  fi
done

for claim in $(kubectl -n "$ns" get pvc -l "$selector" -o jsonpath='{.items[*].metadata.name}'); do
  pod=${claim#archive-}
  case " $pods " in
    *" $pod "*) ;;
    *) echo "not copied: volume $claim (pod $pod is not running); see deploy/kubernetes/README.md" >&2 ;;
  esac
done
