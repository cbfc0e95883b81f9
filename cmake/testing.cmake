# pier_add_gtest(<name> SOURCES <files...> LIBS <targets...> LABELS <labels...> [TIMEOUT s])
# One GoogleTest binary; every TEST becomes a CTest test (discovered at test
# time, so building does not run test binaries), labelled by tier.
include(GoogleTest)
function(pier_add_gtest name)
  cmake_parse_arguments(arg "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ${arg_LIBS} GTest::gtest GTest::gtest_main pier_warnings)
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${arg_LABELS}" TIMEOUT ${arg_TIMEOUT})
endfunction()
