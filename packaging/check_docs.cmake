# check_docs.cmake: ctest script: regenerates the docs and fails if the committed mtproxy.conf drifted.
# Inputs: GEN (gen_docs), WRAPPER (emulator, may be empty), OUT (scratch dir), COMMITTED, SYSCONFDIR.
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
separate_arguments(_wrap UNIX_COMMAND "${WRAPPER}")
execute_process(COMMAND ${_wrap} "${GEN}" --sysconfdir "${SYSCONFDIR}" "${OUT}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gen_docs failed: ${rc}")
endif()
foreach(f mtproxy.8 mtproxy.conf.5 mtproxy.conf)
  file(SIZE "${OUT}/${f}" sz)
  if(sz LESS 1000)
    message(FATAL_ERROR "${OUT}/${f} is suspiciously small (${sz} bytes)")
  endif()
endforeach()

# The man pages must format without groff warnings (when groff is installed).
find_program(GROFF groff)
if(GROFF)
  foreach(f mtproxy.8 mtproxy.conf.5)
    execute_process(COMMAND "${GROFF}" -man -ww -z "${OUT}/${f}"
                    RESULT_VARIABLE rc ERROR_VARIABLE warnings)
    if(NOT rc EQUAL 0 OR NOT warnings STREQUAL "")
      message(FATAL_ERROR "groff warns about ${f}:\n${warnings}")
    endif()
  endforeach()
else()
  message(STATUS "groff not found: man page lint skipped")
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${COMMITTED}" "${OUT}/mtproxy.conf"
                RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  find_program(DIFF diff)
  if(DIFF)
    execute_process(COMMAND "${DIFF}" -u "${COMMITTED}" "${OUT}/mtproxy.conf")
  endif()
  message(FATAL_ERROR "${COMMITTED} differs from what the option table generates "
                      "(${OUT}/mtproxy.conf). After changing options_table, run: "
                      "cmake --build <build dir> --target update-docs")
endif()
message(STATUS "mtproxy.conf, mtproxy.8 and mtproxy.conf.5 match the option table")
