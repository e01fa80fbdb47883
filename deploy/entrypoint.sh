#!/bin/sh
# The image's entrypoint: run one of the project's commands, or prepare a node for them.
#   gemshare-scheduler [OPTIONS]      (the default)
#   gemshare-device-plugin [OPTIONS]
#   gemshare-dra-plugin [OPTIONS]
#   gemshare-node-identity [OPTIONS]
#   gemsharectl [OPTIONS]
# As root, with the host's directories mounted under HOST_ROOT:
#   install-library HOST_ROOT         put libnvs.so at HOST_ROOT/usr/local/lib/gemshare/libnvs.so,
#                                     where the device plugin and the DRA driver mount it into pods from
#   prepare-scheduler HOST_ROOT       give the scheduler's user its socket and state directories
#   prepare-host HOST_ROOT            both
set -eu

# Set from outside to try the node commands away from the image; SCHEDULER_USER also where the
# scheduler runs as another user (root, to run MPS: deploy/kubernetes-mps).
LIBRARY=${LIBRARY:-/usr/local/lib/gemshare/libnvs.so}
SCHEDULER_USER=${SCHEDULER_USER:-gemshare}
# And these to run the commands from elsewhere.
COMMANDS=${COMMANDS:-/opt/gemshare/bin}
HOLD_SIGNALS=${HOLD_SIGNALS:-/usr/local/lib/gemshare/hold-signals}

install_library() {
    root=$1
    mkdir -p "$root/usr/local/lib/gemshare"
    # Copied beside and renamed into place: programs running now keep the library they mapped,
    # where writing over it in place could crash them.
    cp "$LIBRARY" "$root/usr/local/lib/gemshare/.libnvs.so.new"
    chmod 0755 "$root/usr/local/lib/gemshare/.libnvs.so.new"
    mv -f "$root/usr/local/lib/gemshare/.libnvs.so.new" "$root/usr/local/lib/gemshare/libnvs.so"
    echo "gemshare: libnvs.so installed in $root/usr/local/lib/gemshare"
}

prepare_scheduler() {
    root=$1
    # The scheduler refuses a socket directory another user could write to, and makes its socket
    # in it: owned by its user, mode 0755 (every pod's programs must reach the socket).
    for directory in "$root/var/run/gemshare" "$root/var/lib/gemshare"; do
        mkdir -p "$directory"
        chown "$SCHEDULER_USER:" "$directory"  # and its login group
        chmod 0755 "$directory"
    done
    echo "gemshare: socket and state directories in $root handed to $SCHEDULER_USER"
}

command=${1:-gemshare-scheduler}
[ $# -gt 0 ] && shift
case "$command" in
    gemshare-scheduler)
        # As the installed command does: SIGHUP, SIGUSR1 and SIGUSR2 wait while Python starts
        # (under hostPID, kill -HUP from the node would otherwise end a starting scheduler).
        exec "$HOLD_SIGNALS" "$COMMANDS/$command" "$@" ;;
    gemshare-device-plugin|gemshare-dra-plugin|gemshare-node-identity|gemsharectl)
        exec "$COMMANDS/$command" "$@" ;;
    install-library|prepare-scheduler|prepare-host)
        if [ $# -ne 1 ]; then
            echo "gemshare: usage: $command HOST_ROOT" >&2
            exit 2
        fi
        case "$command" in
            install-library) install_library "$1" ;;
            prepare-scheduler) prepare_scheduler "$1" ;;
            prepare-host) install_library "$1" && prepare_scheduler "$1" ;;
        esac ;;
    *)
        echo "gemshare: unknown command '$command': use gemshare-scheduler," \
             "gemshare-device-plugin, gemshare-dra-plugin, gemsharectl," \
             "install-library HOST_ROOT," \
             "prepare-scheduler HOST_ROOT or prepare-host HOST_ROOT" >&2
        exit 2 ;;
esac
