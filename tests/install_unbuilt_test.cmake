# ctest install_unbuilt (cmake -P): `cmake --install` from a build directory whose installed targets were not
# built (what scripts/run.sh used to leave: mk-run only) fails before installing anything, naming what is
# missing and the command that builds it.
# Variables: SOURCE_DIR WORK_DIR GENERATOR
cmake_minimum_required(VERSION 3.25)
foreach(var SOURCE_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_unbuilt_test.cmake needs -D${var}=...")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
set(build "${WORK_DIR}/build")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${build}" -G "${GENERATOR}" -DMK_GPU=none
                        -DMK_BUILD_TESTS=OFF
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring failed:\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --install "${build}" --prefix "${WORK_DIR}/prefix"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "cmake --install succeeded from a build directory where nothing was built:\n${out}")
endif()
string(REGEX REPLACE "[ \n]+" " " message "${err}")  # CMake wraps its error messages
foreach(expected "cmake --install: these are not built yet:" "${build}/host/tools/mk-chat"
                 "${build}/host/api/libmonokernel.so" "cmake --build ${build} --target mk-chat monokernel")
  string(FIND "${message}" "${expected}" at)
  if(at LESS 0)
    message(FATAL_ERROR "the error does not say '${expected}':\n${err}")
  endif()
endforeach()
if(EXISTS "${WORK_DIR}/prefix")
  message(FATAL_ERROR "something was installed before the error: ${WORK_DIR}/prefix exists")
endif()
message(STATUS "install_unbuilt: ok")
