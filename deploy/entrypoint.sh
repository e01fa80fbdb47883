#!/bin/sh
# The image's entrypoint: run one of the project's commands, or prepare a node for them.
#   gemshare-scheduler [OPTIONS]      (the default)
#   gemshare-device-plugin [OPTIONS]
#   gemsharectl [OPTIONS]
#   prepare-host HOST_ROOT            as root, with the host's directories mounted under HOST_ROOT:
#       put libnvs.so at HOST_ROOT/usr/local/lib/gemshare/libnvs.so, where the device plugin
#       mounts it into pods from, and give the scheduler's user its socket and state directories.
set -eu

# Set from outside only to try prepare-host away from the image.
LIBRARY=${LIBRARY:-/usr/local/lib/gemshare/libnvs.so}
SCHEDULER_USER=${SCHEDULER_USER:-gemshare}

prepare_host() {
    root=$1
    mkdir -p "$root/usr/local/lib/gemshare"
    # Copied beside and renamed into place: programs running now keep the library they mapped,
    # where writing over it in place could crash them.
    cp "$LIBRARY" "$root/usr/local/lib/gemshare/.libnvs.so.new"
    chmod 0755 "$root/usr/local/lib/gemshare/.libnvs.so.new"
    mv -f "$root/usr/local/lib/gemshare/.libnvs.so.new" "$root/usr/local/lib/gemshare/libnvs.so"
    # The scheduler refuses a socket directory another user could write to, and makes its socket
    # in it: owned by its user, mode 0755 (every pod's programs must reach the socket).
    for directory in "$root/var/run/gemshare" "$root/var/lib/gemshare"; do
        mkdir -p "$directory"
        chown "$SCHEDULER_USER:" "$directory"  # and its login group
        chmod 0755 "$directory"
    done
    echo "gemshare: libnvs.so installed in $root/usr/local/lib/gemshare; socket and state" \
         "directories handed to $SCHEDULER_USER"
}

command=${1:-gemshare-scheduler}
[ $# -gt 0 ] && shift
case "$command" in
    gemshare-scheduler|gemshare-device-plugin|gemsharectl)
        exec "/opt/gemshare/bin/$command" "$@" ;;
    prepare-host)
        if [ $# -ne 1 ]; then
            echo "gemshare: usage: prepare-host HOST_ROOT" >&2
            exit 2
        fi
        prepare_host "$1" ;;
    *)
        echo "gemshare: unknown command '$command': use gemshare-scheduler," \
             "gemshare-device-plugin, gemsharectl or prepare-host HOST_ROOT" >&2
        exit 2 ;;
esac
