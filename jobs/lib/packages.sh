# shellcheck shell=bash
# ensure_packages WHO PKG...: install the Debian packages of the list that are
# not installed yet, saying so as WHO; with sudo when not root. The one
# installer of the job scripts (jobs/dev/build.sh, jobs/testbed/testbed.sh, jobs/testbed/hosts.sh).
# Installing starts no service: packages such as slurmd and munge start their
# daemons from their postinst (invoke-rc.d), which fails in a container without
# an init system and is not wanted (the Slurm test starts private ones), so a
# policy-rc.d that forbids it is in place during the install when there is none,
# removed afterwards, also when interrupted. dpkg-query's status is read whole,
# not piped into grep -q: under pipefail grep's early exit can fail the pipeline.
ensure_packages() {
    local who=$1 p st sudo="" missing=()
    shift
    for p in "$@"; do
        st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [[ $st == *"install ok installed"* ]] || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    echo "$who: installing ${missing[*]}" >&2
    (
        policy=/usr/sbin/policy-rc.d
        if [[ ! -e $policy ]]; then
            trap '$sudo rm -f "$policy"' EXIT
            trap 'exit 130' INT TERM
            printf '#!/bin/sh\n# jobs/lib/packages.sh: no service starts while packages are installed\nexit 101\n' |
                $sudo tee "$policy" > /dev/null
            $sudo chmod 755 "$policy"
        fi
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
    )
}
