# common.cmake: shared part of the cross toolchain files: Debian cross gcc, a Debian sysroot, qemu-user.
# Set before including: MTPROXY_TRIPLET (e.g. arm-linux-gnueabihf), CMAKE_SYSTEM_PROCESSOR and
# MTPROXY_QEMU (e.g. qemu-arm-static). MTPROXY_CROSS_SYSROOT (cache/-D) is a directory holding
# the target's -dev packages unpacked with dpkg -x (packaging/cross/run.sh makes it); the C
# library comes from Debian's libc6-dev-<arch>-cross in /usr/<triplet>.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${MTPROXY_TRIPLET}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${MTPROXY_TRIPLET})

if(NOT MTPROXY_CROSS_SYSROOT)
  message(FATAL_ERROR "set -DMTPROXY_CROSS_SYSROOT=DIR (see packaging/cross/run.sh)")
endif()
# try_compile projects re-read this file: hand the variables on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES MTPROXY_CROSS_SYSROOT)

set(CMAKE_FIND_ROOT_PATH ${MTPROXY_CROSS_SYSROOT} /usr/${MTPROXY_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Multiarch headers (openssl/configuration.h lives in include/<triplet>) and link-time lookups
# of the libraries' own dependencies.
set(CMAKE_C_STANDARD_INCLUDE_DIRECTORIES
    ${MTPROXY_CROSS_SYSROOT}/usr/include/${MTPROXY_TRIPLET} ${MTPROXY_CROSS_SYSROOT}/usr/include)
set(CMAKE_EXE_LINKER_FLAGS_INIT
    "-Wl,-rpath-link,${MTPROXY_CROSS_SYSROOT}/usr/lib/${MTPROXY_TRIPLET}")
# pkg-config must not report the host's libraries.
set(ENV{PKG_CONFIG_LIBDIR} ${MTPROXY_CROSS_SYSROOT}/usr/lib/${MTPROXY_TRIPLET}/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${MTPROXY_CROSS_SYSROOT})

# ctest (and custom commands such as gen_docs) run target binaries through qemu-user. The
# build-tree RUNPATH points at the sysroot's libraries; -L gives the target's ld.so and libc.
set(CMAKE_CROSSCOMPILING_EMULATOR ${MTPROXY_QEMU} -L /usr/${MTPROXY_TRIPLET})
