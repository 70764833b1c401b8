#!/usr/bin/env bash
# Install missing Debian packages (Open MPI, OpenBLAS, HDF5, hwloc, CUnit,
# gnuplot; PyTorch and h5py for seed 002's time-series training and its
# comparison test, used as /usr/bin/python3; Slurm and munge for the test that
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
# usage: jobs/dev/build.sh [--help]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libopenblas-dev libopenblas-pthread-dev
      libhdf5-dev hdf5-tools libhwloc-dev hwloc libcunit1-dev libcjson-dev gnuplot-nox clang libclang-rt-dev
      python3-torch python3-h5py python3-numpy slurmd slurmctld slurm-client munge
      iproute2 iptables libnetfilter-queue-dev)
. "$root/jobs/lib/packages.sh"
ensure_packages build "${pkgs[@]}"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j "$(nproc)" >/dev/null
echo "build: $root/build/meshinfer is ready" >&2
