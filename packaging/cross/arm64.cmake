# arm64.cmake: CMake toolchain for 64-bit ARM (Debian arm64, aarch64); tests run under qemu-aarch64.
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(MTPROXY_TRIPLET aarch64-linux-gnu)
set(MTPROXY_QEMU qemu-aarch64-static)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
