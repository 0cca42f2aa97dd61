#!/usr/bin/env bash
# The device tool sends the working tree (tracked files present on disk, plus untracked ones git
# does not ignore), at most 64 MiB with what a call carries. benchmarks/results alone is larger,
# so before a device call move it out of the checkout, keeping only the folders that call reads:
#   bash benchmarks/device_tree.sh slim attr_vith_b8/run11 video_probe/probe video_study/h200
#   ... device calls ...
#   bash benchmarks/device_tree.sh restore      # puts every file back (git status is clean again)
# `slim` refuses while an earlier slim is not restored, and `restore` keeps what the calls added
# under benchmarks/results (new folders stay; kept folders are not overwritten by the aside copy).
set -euo pipefail
cd "$(dirname "$0")/.."
ASIDE=${JP_RESULTS_ASIDE:-/tmp/jouleprof_results_aside}
case ${1:-} in
slim)
    shift
    [ -e "$ASIDE" ] && { echo "device_tree: $ASIDE exists: run 'restore' first" >&2; exit 1; }
    mv benchmarks/results "$ASIDE"
    mkdir -p benchmarks/results
    for keep in "$@"; do
        [ -e "$ASIDE/$keep" ] || { echo "device_tree: no benchmarks/results/$keep (kept nothing for it)" >&2; continue; }
        mkdir -p "benchmarks/results/$(dirname "$keep")"
        cp -a "$ASIDE/$keep" "benchmarks/results/$keep"
    done
    echo "benchmarks/results moved to $ASIDE; kept: ${*:-nothing}; tracked files on disk now $(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {printf "%.1f", s/1048576}') MiB"
    ;;
restore)
    [ -d "$ASIDE" ] || { echo "device_tree: nothing to restore ($ASIDE missing)" >&2; exit 1; }
    cp -an "$ASIDE/." benchmarks/results/
    rm -rf "$ASIDE"
    git status --short benchmarks/results | head -5
    ;;
*)
    echo "usage: benchmarks/device_tree.sh slim [FOLDER under benchmarks/results ...] | restore" >&2
    exit 2
    ;;
esac
