# Installation: the public headers, libpier.so made of every pier_* static
# library that exists, pier.pc for pkg-config, and a CMake package giving
# pier::pier. Included last by the top-level CMakeLists, so every library
# target is already defined here.
include(CMakePackageConfigHelpers)

set(pier_archive_candidates
  pier_base pier_wire pier_driver pier_drivers pier_core pier_boot pier_lib pier_port pier_capi)
set(pier_archives "")
foreach(lib IN LISTS pier_archive_candidates)
  if(TARGET ${lib})
    list(APPEND pier_archives ${lib})
  endif()
endforeach()

# The driver libraries are linked through pier_drivers; take each whole too,
# since a driver registers itself from a static initialiser.
foreach(name self shm tcp ofi fault)
  if(TARGET pier_driver_${name})
    list(APPEND pier_archives pier_driver_${name})
  endif()
endforeach()

# libpier.so is made of the archives' object files: every object is in (no
# self-registering key or driver is dropped, as a whole-archive link would
# ensure), and each object appears once however the archives depend on each
# other. The archives are linked too, for their usage requirements (fmt,
# libfabric, threads); they add no object, since every symbol is defined.
set(pier_objects "")
foreach(lib IN LISTS pier_archives)
  get_target_property(lib_type ${lib} TYPE)
  if(lib_type STREQUAL "STATIC_LIBRARY" OR lib_type STREQUAL "OBJECT_LIBRARY")
    list(APPEND pier_objects $<TARGET_OBJECTS:${lib}>)
  endif()
endforeach()
add_library(pier SHARED ${pier_objects})
set_target_properties(pier PROPERTIES
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  EXPORT_NAME pier
  LINKER_LANGUAGE CXX)
target_link_libraries(pier PRIVATE ${pier_archives})
target_include_directories(pier INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# In the build tree, users of `pier` (pier-info) also use the internal headers,
# which include fmt.
target_link_libraries(pier INTERFACE $<BUILD_INTERFACE:fmt::fmt>)
target_compile_features(pier INTERFACE cxx_std_20)
add_library(pier::pier ALIAS pier)

# pier-info reads every library's keys, so it links the whole library.
if(TARGET pier-info)
  target_link_libraries(pier-info PRIVATE pier)
  set_target_properties(pier-info PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  install(TARGETS pier-info RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(TARGETS pier EXPORT pierTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

set(pier_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/pier)
install(EXPORT pierTargets NAMESPACE pier:: DESTINATION ${pier_cmake_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/pierConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/pierConfig.cmake INSTALL_DESTINATION ${pier_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pierConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pierConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/pierConfigVersion.cmake
        DESTINATION ${pier_cmake_dir})

# pkg-config: -lpier is enough for a shared library; a sanitized build also
# needs the sanitizer runtime at the user's link.
set(PIER_PC_LIBS_EXTRA "")
if(PIER_SANITIZE STREQUAL "asan")
  set(PIER_PC_LIBS_EXTRA "-fsanitize=address,undefined")
elseif(PIER_SANITIZE STREQUAL "tsan")
  set(PIER_PC_LIBS_EXTRA "-fsanitize=thread")
endif()
# The prefix is found relative to the .pc file, so `cmake --install --prefix`
# anywhere gives a working pier.pc.
set(pier_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${pier_pc_dir}")
  set(PIER_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH pier_pc_up /pier-root/${pier_pc_dir} /pier-root)
  string(REGEX REPLACE "/$" "" pier_pc_up "${pier_pc_up}")
  set(PIER_PC_PREFIX "\${pcfiledir}/${pier_pc_up}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/pier.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pier.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pier.pc
        DESTINATION ${pier_pc_dir})

# libportals.so.4: Portals 4 programs link with the customary -lportals.
if(TARGET portals)
  install(TARGETS portals LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
