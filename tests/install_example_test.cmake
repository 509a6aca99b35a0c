# ctest install_example (cmake -P): the library as a user gets it.
#   1. cmake --install the build tree into a fresh prefix;
#   2. configure and build host/api/example (a C and a C++ program) against that prefix with
#      find_package(monokernel), warnings as errors;
#   3. run them on a tiny chat model (CPU emulator) and check the output: the tokenizer round trip, two
#      turns where the second ingests less than the first, and the same greedy reply from the C example,
#      the C++ example and the installed mk-chat -p;
#   4. build the C example again with the compiler alone and the installed pkg-config file (its rpath from
#      pkg-config's libdir), and check that it gives the same reply.
# Variables: BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR MAKE_MODEL (the mk-tiny-chat-model tool).
cmake_minimum_required(VERSION 3.25)
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR MAKE_MODEL)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_example_test.cmake needs -D${var}=...")
  endif()
endforeach()

# Runs a command; stops the test with its output if it fails. The output lands in OUT / ERR.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n--- stdout\n${out}\n--- stderr\n${err}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
  set(ERR "${err}" PARENT_SCOPE)
endfunction()

# A macro, not a function: the caller reads CMAKE_MATCH_<n>. `var` names the variable holding the text
# (its value is never substituted into the macro's code, whatever characters the model printed).
macro(expect_match regex var what)
  if(NOT "${${var}}" MATCHES "${regex}")
    message(FATAL_ERROR "${what}: no match for '${regex}' in:\n${${var}}")
  endif()
endmacro()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
foreach(file include/monokernel.h include/monokernel.hpp bin/mk-chat bin/mk-server)
  if(NOT EXISTS "${prefix}/${file}")
    message(FATAL_ERROR "not installed: ${prefix}/${file}")
  endif()
endforeach()
file(GLOB_RECURSE config "${prefix}/*/monokernelConfig.cmake")
file(GLOB_RECURSE library "${prefix}/*/libmonokernel.so")
if(NOT config OR NOT library)
  message(FATAL_ERROR "not installed: monokernelConfig.cmake (${config}) or libmonokernel.so (${library})")
endif()

run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/host/api/example" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_C_FLAGS=-Werror -DCMAKE_CXX_FLAGS=-Werror)
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${MAKE_MODEL}" "${WORK_DIR}/model")

run("${WORK_DIR}/build/monokernel-example" "${WORK_DIR}/model" "Hello, world")
set(example "${OUT}")
message(STATUS "example output:\n${example}")
expect_match("round trip: ok" example "tokenize/detokenize")
expect_match("turn 1: ingested ([0-9]+) tokens, generated 16" example "first turn")
set(first_ingested ${CMAKE_MATCH_1})
expect_match("turn 2: ingested ([0-9]+) tokens, generated 16" example "second turn")
if(NOT CMAKE_MATCH_1 LESS first_ingested)
  message(FATAL_ERROR "turn 2 ingested ${CMAKE_MATCH_1} tokens, turn 1 ${first_ingested}: the history was re-ingested")
endif()

# The first reply, between the example's markers, must be what mk-chat -p says (greedy, same model).
string(FIND "${example}" "reply: <<<" begin)
string(FIND "${example}" ">>>\nturn 1:" end)
if(begin LESS 0 OR end LESS 0)
  message(FATAL_ERROR "no reply markers in the example's output")
endif()
math(EXPR begin "${begin} + 10")
math(EXPR length "${end} - ${begin}")
string(SUBSTRING "${example}" ${begin} ${length} reply)
run("${prefix}/bin/mk-chat" -m "${WORK_DIR}/model" --emulator --temp 0 -n 16 -c 512 -p "Hello, world")
if(NOT OUT STREQUAL reply AND NOT OUT STREQUAL "${reply}\n")
  message(FATAL_ERROR "the example's reply differs from mk-chat -p:\n[${reply}]\n[${OUT}]")
endif()
run("${WORK_DIR}/build/monokernel-example-cpp" "${WORK_DIR}/model" "Hello, world")
string(FIND "${OUT}" "reply: <<<${reply}>>>\nturn 1: ingested" found)
if(found LESS 0)
  message(FATAL_ERROR "the C++ example's reply differs from the C example's [${reply}]:\n${OUT}")
endif()

# pkg-config, as a Makefile user builds: cc example.c $(pkg-config --cflags --libs monokernel) + an rpath.
find_program(PKG_CONFIG pkg-config REQUIRED)
find_program(C_COMPILER NAMES cc gcc clang REQUIRED)
file(GLOB_RECURSE pc_file "${prefix}/*/pkgconfig/monokernel.pc")
if(NOT pc_file)
  message(FATAL_ERROR "not installed: lib/pkgconfig/monokernel.pc under ${prefix}")
endif()
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
set(pkg_config ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pc_dir}" ${PKG_CONFIG})
run(${pkg_config} --cflags --libs monokernel)
string(STRIP "${OUT}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${pkg_config} --variable=libdir monokernel)
string(STRIP "${OUT}" libdir)
if(NOT EXISTS "${libdir}/libmonokernel.so")
  message(FATAL_ERROR "monokernel.pc's libdir ${libdir} has no libmonokernel.so (the prefix installed to is ${prefix})")
endif()
run(${C_COMPILER} -Werror "${SOURCE_DIR}/host/api/example/example.c" ${flags} "-Wl,-rpath,${libdir}"
    -o "${WORK_DIR}/example-pkg-config")
run("${WORK_DIR}/example-pkg-config" "${WORK_DIR}/model" "Hello, world")
string(FIND "${OUT}" "reply: <<<${reply}>>>\nturn 1: ingested" found)
if(found LESS 0)
  message(FATAL_ERROR "the example built with pkg-config replies differently from the CMake build [${reply}]:\n${OUT}")
endif()
message(STATUS "install_example: ok")
