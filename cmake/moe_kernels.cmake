# The shipped MoE grouped-GEMM kernels: one translation unit per line of
# src/kernels/moe/configs.def (so they compile in parallel), generated from
# src/kernels/moe/moe_kernel.cu.in. Editing the list re-runs this at the next build.
# Sets XSTAGE_MOE_KERNEL_SOURCES.
set(_moe_list "${CMAKE_CURRENT_SOURCE_DIR}/src/kernels/moe/configs.def")
set(_moe_template "${CMAKE_CURRENT_SOURCE_DIR}/src/kernels/moe/moe_kernel.cu.in")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_moe_list}" "${_moe_template}")
file(STRINGS "${_moe_list}" _moe_lines REGEX "^XSTAGE_MOE_CONFIG\\(")
set(XSTAGE_MOE_KERNEL_SOURCES "")
set(_moe_names "")
foreach(XSTAGE_MOE_CONFIG_LINE IN LISTS _moe_lines)
  string(REGEX REPLACE "^XSTAGE_MOE_CONFIG\\(([a-z0-9_]+),.*" "\\1" _moe_name "${XSTAGE_MOE_CONFIG_LINE}")
  if(_moe_name IN_LIST _moe_names)
    message(FATAL_ERROR "src/kernels/moe/configs.def names ${_moe_name} twice")
  endif()
  list(APPEND _moe_names ${_moe_name})
  set(_moe_tu "${CMAKE_CURRENT_BINARY_DIR}/generated/moe/moe_${_moe_name}.cu")
  configure_file("${_moe_template}" "${_moe_tu}" @ONLY)
  list(APPEND XSTAGE_MOE_KERNEL_SOURCES "${_moe_tu}")
endforeach()
list(LENGTH _moe_names _moe_count)
message(STATUS "MoE kernels: ${_moe_count} configurations from src/kernels/moe/configs.def")
