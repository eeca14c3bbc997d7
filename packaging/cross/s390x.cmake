# s390x.cmake: CMake toolchain for IBM Z (Debian s390x, 64-bit big-endian); tests run under qemu-s390x.
set(CMAKE_SYSTEM_PROCESSOR s390x)
set(MTPROXY_TRIPLET s390x-linux-gnu)
set(MTPROXY_QEMU qemu-s390x-static)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
