# Included by the clang sub-build (COHORT_CLANG_CHECKS, cmake/ClangSubbuild.cmake) after every
# target is defined. Defines `clang-checks`, what the sub-build builds:
#  - the fuzz targets (COHORT_BUILD_FUZZERS), compiled, instrumented and linked for real;
#  - every other translation unit of the project checked with -fsyntax-only: the thread-safety
#    analysis runs in clang's front end, so a check needs no code generation and no link (a third
#    to a quarter of a full compile). cmake/thread_safety_ninja.cmake writes one ninja edge per
#    translation unit from compile_commands.json; ninja's depfiles make the check incremental.

# The project's own targets `target` links, itself included, transitively, into `out_var`.
function(cohort_linked_targets target out_var)
  set(_seen ${${out_var}})
  if(NOT TARGET ${target})
    return()
  endif()
  get_target_property(_aliased ${target} ALIASED_TARGET)
  if(_aliased)
    set(target ${_aliased})
  endif()
  get_target_property(_imported ${target} IMPORTED)
  if(_imported OR target IN_LIST _seen)
    return()
  endif()
  list(APPEND _seen ${target})
  get_target_property(_links ${target} LINK_LIBRARIES)
  foreach(_lib IN LISTS _links)
    if(TARGET ${_lib})
      cohort_linked_targets(${_lib} _seen)
    endif()
  endforeach()
  set(${out_var} ${_seen} PARENT_SCOPE)
endfunction()

# Compiled for real: the fuzz targets and what they link. Generated before the check: every
# protobuf header and cohort-launch's embedded files (the check's translation units include them).
set(_compiled)
set(_fuzzers)
if(COHORT_BUILD_FUZZERS)
  get_property(_fuzzers DIRECTORY ${PROJECT_SOURCE_DIR}/tests/fuzz PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_fuzzer IN LISTS _fuzzers)
    cohort_linked_targets(${_fuzzer} _compiled)
  endforeach()
endif()

find_program(COHORT_NINJA NAMES ninja ninja-build)
if(NOT COHORT_NINJA)
  message(FATAL_ERROR "the clang sub-build's thread-safety check runs ninja, which is not installed: install it "
                      "(scripts/install-deps.sh does), or configure with -DCOHORT_CLANG_SUBBUILD=OFF")
endif()

set(_ninja_file ${CMAKE_BINARY_DIR}/thread-safety/check.ninja)
list(JOIN _compiled "," _compiled)  # One argument on the command line.
add_custom_target(clang-checks
  COMMAND ${CMAKE_COMMAND} -DCOMPILE_COMMANDS=${CMAKE_BINARY_DIR}/compile_commands.json
          -DBINARY_DIR=${CMAKE_BINARY_DIR} -DNINJA_FILE=${_ninja_file} "-DCOMPILED_TARGETS=${_compiled}"
          -P ${PROJECT_SOURCE_DIR}/cmake/thread_safety_ninja.cmake
  COMMAND ${COHORT_NINJA} -f ${_ninja_file}
  COMMENT "Thread-safety analysis (clang -fsyntax-only) of every translation unit"
  USES_TERMINAL)
add_dependencies(clang-checks cohort_proto_headers cohort_xla_compat_proto_headers cohort_attempts_proto_headers
                 cohort_launch_embedded_files ${_fuzzers})
