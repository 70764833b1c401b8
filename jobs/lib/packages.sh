# shellcheck shell=bash
# ensure_packages PKG...: install the Debian packages of the list that are not
# installed yet (quietly; the job scripts that shape links need iptables,
# libnetfilter-queue-dev for mi_netem, iproute2, util-linux). Sourced by
# jobs/testbed.sh and jobs/hosts.sh. dpkg-query's status is read whole, not
# piped into grep -q: under pipefail grep's early exit can fail the pipeline.
ensure_packages() {
    local p st missing=()
    for p in "$@"; do
        st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [[ $st == *"install ok installed"* ]] || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
}
