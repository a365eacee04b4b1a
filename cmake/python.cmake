# The Python package `xstage` (issue 35): the nanobind extension xstage._C over the C++
# libraries. Included from CMakeLists.txt when XSTAGE_BUILD_PYTHON is ON (pyproject.toml turns
# it on for `pip install .`). The extension never links against libtorch: tensors cross as
# DLPack capsules or raw device pointers, streams as integers (docs/python.md).
#
# What it contains follows the C++ options: the model always; attention (and its tail-split
# workspace) with XSTAGE_BUILD_ATTENTION; the MoE grouped GEMM with XSTAGE_BUILD_MOE. Without
# XSTAGE_BUILD_MOE the host-only weight quantisers/prepackers (src/ops/moe_quant*.cpp) are still
# compiled in, so prepacking works (and is tested) on a machine without the kernels.

find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
if(NOT nanobind_DIR AND NOT nanobind_ROOT)
  execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
                  OUTPUT_VARIABLE nanobind_ROOT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
find_package(nanobind CONFIG QUIET)
if(NOT nanobind_FOUND)
  message(FATAL_ERROR "xstage: XSTAGE_BUILD_PYTHON=ON needs nanobind in ${Python_EXECUTABLE}'s "
                      "environment (python -m pip install nanobind)")
endif()

# Static libraries linked into a shared module must be position independent.
foreach(_t xstage_model xstage_runtime xstage_kernels xstage_attention xstage_moe xstage_ulysses)
  if(TARGET ${_t})
    set_target_properties(${_t} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
endforeach()

nanobind_add_module(_C NB_STATIC
  src/python/module.cpp
  src/python/model_bind.cpp
  src/python/attention_bind.cpp
  src/python/moe_bind.cpp
  src/python/team_bind.cpp)
target_include_directories(_C PRIVATE src)
if(XSTAGE_BUILD_ATTENTION)
  target_link_libraries(_C PRIVATE xstage_attention)
  target_compile_definitions(_C PRIVATE XSTAGE_PY_HAVE_ATTENTION=1)
endif()
if(XSTAGE_BUILD_MOE)
  target_link_libraries(_C PRIVATE xstage_moe)
  target_compile_definitions(_C PRIVATE XSTAGE_PY_HAVE_MOE=1)
else()
  target_sources(_C PRIVATE src/ops/moe_quant.cpp src/ops/moe_quant4.cpp)
endif()
# Static libraries resolve left to right: the runtime (its team uses the model's SM split) before
# the model, both after the operator libraries.
target_link_libraries(_C PRIVATE xstage_runtime xstage_model)
# Teams from a torch.distributed process group (Team::from_unique_id) and the fused Ulysses op.
target_compile_definitions(_C PRIVATE XSTAGE_PY_HAVE_TEAM=1)
if(TARGET xstage_ulysses)
  target_link_libraries(_C PRIVATE xstage_ulysses)
  target_compile_definitions(_C PRIVATE XSTAGE_PY_HAVE_ULYSSES=1)
endif()
# Drop shared libraries nothing references; find NCCL (a dependency of the runtime's error
# path) where the build found it. xstage/__init__.py also preloads PyTorch's NCCL if present.
target_link_options(_C PRIVATE "LINKER:--as-needed")
get_filename_component(_xs_nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
set_target_properties(_C PROPERTIES
  INSTALL_RPATH "${_xs_nccl_dir}"
  BUILD_RPATH "${_xs_nccl_dir}"
  # Built in the tree (cmake --build): the module lands next to the package sources' parent
  # build dir; `python/xstage/_ext.py` looks there when no installed copy exists.
  LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/python/xstage")

# A shared module links with undefined symbols allowed (libpython's); import it once after
# linking so a missing C++ symbol fails the build, not the first `import xstage`.
add_custom_command(TARGET _C POST_BUILD
  COMMAND "${Python_EXECUTABLE}" -c "import importlib.util as u, sys; s = u.spec_from_file_location('xstage._C', sys.argv[1]); u.module_from_spec(s)" "$<TARGET_FILE:_C>"
  COMMENT "xstage: checking that the extension imports"
  VERBATIM)

install(TARGETS _C LIBRARY DESTINATION xstage COMPONENT python)
install(FILES presets/h200-nvlink.json DESTINATION xstage/presets COMPONENT python)
