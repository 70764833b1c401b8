# CMake toolchain file: 64-bit ARM Linux (Raspberry Pi 4 and 5 running a
# 64-bit OS) with Debian's cross compiler gcc-aarch64-linux-gnu. Libraries for
# the target come from arm64 multiarch packages (e.g. libcunit1-dev:arm64 in
# /usr/lib/aarch64-linux-gnu), which Debian's cross gcc searches by itself.
#
# AARCH64_STATIC (default ON) links executables statically, so that
# qemu-aarch64 runs them without an aarch64 sysroot (jobs/dev/cross_kernels.sh).
#
# usage: cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#
# CMake reads this file twice per configure: first as the toolchain file
# (before the compiler is known), then as CMAKE_USER_MAKE_RULES_OVERRIDE
# (after the compiler and CMake's platform files, before they are used).

if(NOT DEFINED CMAKE_C_COMPILER_ID)
  # ------------------------------------------------ as the toolchain file
  set(CMAKE_SYSTEM_NAME Linux)
  set(CMAKE_SYSTEM_PROCESSOR aarch64)
  set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
  set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

  # Find programs on the host, libraries and headers for the target only:
  # the multiarch directories (/usr/lib/aarch64-linux-gnu via the library
  # architecture above) and the cross libc's own tree.
  set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
  set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
  set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
  set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
  set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

  # pkg-config must read the arm64 .pc files, not the host's. The environment
  # set here lasts for the configure step, which is when pkg-config runs.
  set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
  set(ENV{PKG_CONFIG_PATH} "")

  # try_compile projects see the same settings.
  list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES AARCH64_STATIC)

  # Tests added with add_test run under qemu (ctest in the cross build tree).
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)

  if(NOT DEFINED AARCH64_STATIC)
    set(AARCH64_STATIC ON CACHE BOOL "Link aarch64 executables statically (runs under qemu without a sysroot)")
  endif()
  if(AARCH64_STATIC)
    set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
  endif()
  set(CMAKE_USER_MAKE_RULES_OVERRIDE "${CMAKE_CURRENT_LIST_FILE}")
else()
  # ------------------------------------ as CMAKE_USER_MAKE_RULES_OVERRIDE
  if(AARCH64_STATIC)
    # find_library (and so pkg_check_modules' imported targets) must return
    # libfoo.a, not libfoo.so, which a -static link refuses. CMake's platform
    # files reset the suffix list after the toolchain file, hence here.
    set(CMAKE_FIND_LIBRARY_SUFFIXES ".a")
  endif()
endif()
