# check_install.cmake: ctest script: `cmake --install` into a scratch DESTDIR and check the layout.
# Inputs: BUILD (build dir), DEST (scratch DESTDIR), CONF, FILES (|-separated paths expected under DEST).
file(REMOVE_RECURSE "${DEST}")
set(ENV{DESTDIR} "${DEST}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
string(REPLACE "|" ";" FILES "${FILES}")
foreach(f ${FILES})
  if(NOT EXISTS "${DEST}${f}")
    message(FATAL_ERROR "not installed: ${f}")
  endif()
  message(STATUS "installed: ${f}")
endforeach()
# A second install keeps the (possibly edited) config.
file(APPEND "${DEST}${CONF}" "# edited\n")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD}" RESULT_VARIABLE rc
                OUTPUT_QUIET)
file(STRINGS "${DEST}${CONF}" last REGEX "^# edited$")
if(NOT rc EQUAL 0 OR NOT last)
  message(FATAL_ERROR "a second install overwrote ${CONF}")
endif()
file(REMOVE_RECURSE "${DEST}")
