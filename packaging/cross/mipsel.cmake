# mipsel.cmake: CMake toolchain for 32-bit MIPS little-endian (Debian mipsel; ath79/ramips routers); tests run under qemu-mipsel.
set(CMAKE_SYSTEM_PROCESSOR mipsel)
set(MTPROXY_TRIPLET mipsel-linux-gnu)
set(MTPROXY_QEMU qemu-mipsel-static)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
