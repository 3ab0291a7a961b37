# Sourced by the GPU scripts that log what they print (threads_check.sh, slack_check.sh,
# host_check.sh), from the repository root.
#
# log_to NAME: sets WORK to a fresh temporary folder and sends everything the script prints from
# then on to NAME.log as well: under $OUT when it is set (the device tool's folder, which comes
# back), else under $WORK. LOG holds the log's path.
log_to() {
    WORK=$(mktemp -d "/tmp/cachalot-$1.XXXXXX")
    LOG=${OUT:-$WORK}/$1.log
    mkdir -p "$(dirname "$LOG")"
    exec > >(tee "$LOG") 2>&1
}
