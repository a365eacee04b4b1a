# The MoE model-shape table, bench/moe-models.json, embedded in the C++ code (issue 34): the file
# becomes a raw string literal in a generated header that src/model/moe_routing.cpp parses, so
# the CLI needs no source tree at run time. Included from CMakeLists.txt before xstage_model.
#
# Read at configure time; CMAKE_CONFIGURE_DEPENDS re-runs CMake (and so regenerates the header)
# when the file changes. The JSON is parsed here once as well, so a file that is not JSON or has
# no "models" list fails the build; its fields are checked by the C++ parser (a CPU test).

set(XSTAGE_MOE_MODELS_JSON "${CMAKE_CURRENT_SOURCE_DIR}/bench/moe-models.json")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${XSTAGE_MOE_MODELS_JSON}")
file(READ "${XSTAGE_MOE_MODELS_JSON}" XSTAGE_MOE_MODELS_TEXT)

string(JSON _xs_moe_count ERROR_VARIABLE _xs_moe_err LENGTH "${XSTAGE_MOE_MODELS_TEXT}" models)
if(_xs_moe_err)
  message(FATAL_ERROR "xstage: ${XSTAGE_MOE_MODELS_JSON}: ${_xs_moe_err}")
endif()
if(_xs_moe_count EQUAL 0)
  message(FATAL_ERROR "xstage: ${XSTAGE_MOE_MODELS_JSON}: the \"models\" list is empty")
endif()

# The raw string's closing sequence must not occur in the text, or the literal ends early.
string(FIND "${XSTAGE_MOE_MODELS_TEXT}" ")xs_moe_json\"" _xs_moe_delim)
if(NOT _xs_moe_delim EQUAL -1)
  message(FATAL_ERROR "xstage: ${XSTAGE_MOE_MODELS_JSON} contains the raw-string delimiter )xs_moe_json\"")
endif()

# configure_file rewrites the header only when its text changes (no needless recompiles).
set(XSTAGE_GENERATED_DIR "${CMAKE_CURRENT_BINARY_DIR}/generated")
configure_file("${CMAKE_CURRENT_SOURCE_DIR}/cmake/moe_models_json.hpp.in"
               "${XSTAGE_GENERATED_DIR}/xstage_generated/moe_models_json.hpp" @ONLY)
