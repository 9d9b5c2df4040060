# ctest's driver for the downstream example (examples/cpp); tests/cpp/CMakeLists.txt registers it.
#   MODE=find_package  install the built mxq into a fresh prefix, configure examples/cpp against it
#                      (-Dmxq_DIR: find_package(mxq), mxq::mxq as a user meets them), build it, run it.
#   MODE=stdout_full   run EXAMPLE with stdout on /dev/full: it must exit 1 and say it could not write.
cmake_minimum_required(VERSION 3.24)

# Runs a command quietly; on failure prints what it said and stops.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
endfunction()

if(MODE STREQUAL "find_package")
  file(REMOVE_RECURSE "${WORK_DIR}")
  run("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
  file(GLOB_RECURSE config "${WORK_DIR}/prefix/*/mxqConfig.cmake")
  if(NOT config)
    message(FATAL_ERROR "no mxqConfig.cmake under ${WORK_DIR}/prefix")
  endif()
  get_filename_component(mxq_dir "${config}" DIRECTORY)
  set(args -S "${SOURCE_DIR}/examples/cpp" -B "${WORK_DIR}/build" -G "${GENERATOR}"
           "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
           "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}" "-Dmxq_DIR=${mxq_dir}")
  if(CUDA_ROOT)
    list(APPEND args "-DCUDAToolkit_ROOT=${CUDA_ROOT}")
  endif()
  run("configuring examples/cpp against ${mxq_dir}" "${CMAKE_COMMAND}" ${args})
  run("building examples/cpp" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
  message(STATUS "find_package(mxq) found ${mxq_dir}; the example built against it says:")
  execute_process(COMMAND "${WORK_DIR}/build/mxq_example" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mxq_example exited with ${rc}")
  endif()
elseif(MODE STREQUAL "stdout_full")
  execute_process(COMMAND "${EXAMPLE}" 64 64 OUTPUT_FILE /dev/full ERROR_VARIABLE err RESULT_VARIABLE rc)
  message(STATUS "mxq_example 64 64 >/dev/full: exit ${rc}, stderr: ${err}")
  if(NOT rc EQUAL 1 OR NOT err MATCHES "cannot write to stdout")
    message(FATAL_ERROR "expected exit 1 and \"cannot write to stdout\"")
  endif()
else()
  message(FATAL_ERROR "MODE must be find_package or stdout_full, got \"${MODE}\"")
endif()
