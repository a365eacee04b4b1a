# Dependency discovery. Header-only deps come from .deps/ (filled by scripts/setup) so the
# same tree builds on the CPU machine and on the bare GPU machine.
set(XSTAGE_DEPS_DIR "${CMAKE_CURRENT_SOURCE_DIR}/.deps" CACHE PATH "header-only deps (scripts/setup)")
if(NOT EXISTS "${XSTAGE_DEPS_DIR}/include/CLI/CLI.hpp")
  message(FATAL_ERROR "xstage: ${XSTAGE_DEPS_DIR} is missing or incomplete - run scripts/setup first")
endif()

find_package(CUDAToolkit 13.0 REQUIRED)

add_library(xstage_deps INTERFACE)
target_include_directories(xstage_deps SYSTEM INTERFACE "${XSTAGE_DEPS_DIR}/include")
target_compile_definitions(xstage_deps INTERFACE FMT_HEADER_ONLY=1)

# CuTe/CUTLASS headers (pinned wheel, see scripts/setup).
add_library(xstage_cutlass INTERFACE)
target_include_directories(xstage_cutlass SYSTEM INTERFACE "${XSTAGE_DEPS_DIR}/cutlass/include")

# NCCL >= 2.28 with the device API (nccl_device.h). Search order: NCCL_ROOT, the
# nvidia-nccl Python package (GPU machine: inside PyTorch's env), the CUDA toolkit.
set(_nccl_hints "$ENV{NCCL_ROOT}" "${NCCL_ROOT}")
execute_process(COMMAND python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])"
                OUTPUT_VARIABLE _py_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(_py_nccl)
  list(APPEND _nccl_hints "${_py_nccl}")
endif()
list(APPEND _nccl_hints "${CUDAToolkit_LIBRARY_ROOT}" "/usr/local/cuda" "/usr")
find_path(NCCL_INCLUDE_DIR nccl_device.h HINTS ${_nccl_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(FATAL_ERROR "xstage: NCCL with the device API (nccl_device.h) not found; set NCCL_ROOT")
endif()
file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_ver REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
message(STATUS "xstage: NCCL ${NCCL_INCLUDE_DIR} ${NCCL_LIBRARY} (${_nccl_ver})")
add_library(xstage_nccl INTERFACE)
target_include_directories(xstage_nccl SYSTEM INTERFACE "${NCCL_INCLUDE_DIR}")
target_link_libraries(xstage_nccl INTERFACE "${NCCL_LIBRARY}")

# GoogleTest built from source (carried in .deps/googletest).
if(XSTAGE_BUILD_TESTS)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory("${XSTAGE_DEPS_DIR}/googletest" "${CMAKE_BINARY_DIR}/_gtest" EXCLUDE_FROM_ALL)
endif()
