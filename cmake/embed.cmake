# embed.cmake: writes a C file holding a text file's bytes (cmake -DIN=FILE -DOUT=FILE.c -DNAME=symbol -P embed.cmake).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT} "/* Generated from ${IN} by cmake/embed.cmake: do not edit. */\n#include <stddef.h>\n"
     "const char ${NAME}[] = {\n${bytes}0};\nconst size_t ${NAME}_len = ${len};\n")
