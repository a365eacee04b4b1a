# Sourced by the prebuilt-run scripts (moe-ab-prebuilt-run, moe-acceptance-prebuilt-run).
# A GPU test run that ran into its timeout (exit 124 or 137) is a hang (run 78): whatever runs
# next would hang the same way and spend the call's device time. This packs what there is and
# exits 1; any other rc returns.
#   stop_if_tests_hung SCRIPT RC LOG OUTDIR FOLDER WHAT_IS_SKIPPED
stop_if_tests_hung() {
  local script=$1 rc=$2 log=$3 out=$4 folder=$5 skipped=$6
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "$script: the GPU tests timed out (a hang?): $skipped"
    tail -5 "$log"
    (cd "$out" && tar czf "$folder.tgz" "$folder" && rm -rf "$folder")
    exit 1
  fi
}
