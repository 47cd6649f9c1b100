# as_root CMD...: runs CMD as root: directly when we are root, else with
# sudo (asking for a password only when a terminal can answer). Sourced by
# the install scripts.
as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"
	elif [ -t 0 ]; then sudo "$@"
	else sudo -n "$@"; fi
}
