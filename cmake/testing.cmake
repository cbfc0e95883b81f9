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
    TEST_LIST ${name}_TESTS
    PROPERTIES TIMEOUT ${arg_TIMEOUT})
  # gtest_discover_tests flattens a list given in PROPERTIES, so several
  # labels ("unit;tsan") would be lost. Set them from a file that CTest reads
  # after the discovered-tests file, when ${name}_TESTS is known.
  if(arg_LABELS)
    set(label_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
    file(WRITE ${label_file}
      "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${arg_LABELS}\")\nendif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${label_file})
  endif()
endfunction()
