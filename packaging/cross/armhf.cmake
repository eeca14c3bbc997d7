# armhf.cmake: CMake toolchain for 32-bit ARM (Debian armhf, little-endian); tests run under qemu-arm.
set(CMAKE_SYSTEM_PROCESSOR arm)
set(MTPROXY_TRIPLET arm-linux-gnueabihf)
set(MTPROXY_QEMU qemu-arm-static)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
