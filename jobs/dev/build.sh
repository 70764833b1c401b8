#!/usr/bin/env bash
# Install missing Debian packages (Open MPI, OpenBLAS, HDF5, hwloc, CUnit,
# cJSON, PCRE2 and ICU for the tokenizers, libmicrohttpd for meshinfer serve's
# HTTP, GLPK for the exact placement planner, gnuplot; PyTorch and h5py for
# CATS's time-series training and its
# comparison test, used as /usr/bin/python3; Python's Jinja2, the chat template
# test's second reference; Slurm and munge for the test that
# submits jobs/testbed/sweep.slurm to a private one-node Slurm, mpi_tests/slurm_check.sh;
# iproute2, iptables and libnetfilter-queue for the emulated testbeds and their
# link emulator mi_netem, so that a fresh machine builds it and runs every test)
# and build meshinfer into build/. Safe to run again: it installs
# nothing that is present and rebuilds only what changed. Installing starts no
# service: the Slurm and munge packages would start their daemons from their
# postinst (invoke-rc.d), which fails in a container without an init system and
# is not wanted (the test starts private ones), so a policy-rc.d that forbids it
# is in place during the install when there is none (removed afterwards; see
# jobs/lib/packages.sh).
#
# usage: jobs/dev/build.sh [--coverage] [--help]
#   --coverage  build into build-coverage/ instead, optimized as build/ is and
#               instrumented with gcc --coverage (jobs/run_tests.sh --coverage)
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out=build flags=()
while (($#)); do
    case "$1" in
        --coverage) out=build-coverage
                    flags=(-DCMAKE_C_COMPILER=gcc -DCMAKE_C_FLAGS=--coverage -DCMAKE_EXE_LINKER_FLAGS=--coverage) ;;
        *) bad_option "$1" ;;
    esac
    shift
done
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libopenblas-dev libopenblas-pthread-dev
      libhdf5-dev hdf5-tools libhwloc-dev hwloc libcunit1-dev libcjson-dev libpcre2-dev libicu-dev libmicrohttpd-dev
      libglpk-dev gnuplot-nox
      clang libclang-rt-dev
      python3-torch python3-h5py python3-numpy python3-jinja2 slurmd slurmctld slurm-client munge
      iproute2 iptables libnetfilter-queue-dev)
. "$root/jobs/lib/packages.sh"
ensure_packages build "${pkgs[@]}"
cmake -S "$root" -B "$root/$out" -DCMAKE_BUILD_TYPE=Release "${flags[@]}" >/dev/null
cmake --build "$root/$out" -j "$(nproc)" >/dev/null
echo "build: $root/$out/meshinfer is ready" >&2
