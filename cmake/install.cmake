# Installing: cmake --install BUILD --prefix PREFIX puts
#   PREFIX/lib/libshardfeed.so (ABI pinned by lib/shardfeed.map), libshardfeed.a
#   PREFIX/include/shardfeed/*.h          the public headers
#   PREFIX/bin/shardfeed                  the CLI
#   PREFIX/lib/pkgconfig/shardfeed.pc     pkg-config --cflags --libs shardfeed
#   PREFIX/share/man/man1/shardfeed.1     the man page (from the CLI's help texts)
#   PREFIX/lib/cmake/shardfeed/           find_package(shardfeed): the targets
#                                         shardfeed::shardfeed (shared) and
#                                         shardfeed::shardfeed_static
# Both the .pc file and the CMake package are relocatable (paths relative to
# where they are installed). tests/install builds a program against an
# installed prefix both ways and runs it.
include(CMakePackageConfigHelpers)

# What the static library needs from the system, as link-line names once
# installed (Debian's -dev packages put them on the default search path).
set(SF_STATIC_DEPS uring zstd xxhash jpeg png webp m)
set(SF_PC_REQUIRES_PRIVATE "liburing libzstd libxxhash libjpeg libpng libwebp")
if(SF_HAVE_ARCHIVE)
  list(APPEND SF_STATIC_DEPS archive z)
  string(APPEND SF_PC_REQUIRES_PRIVATE " libarchive zlib")
endif()
if(SF_HAVE_REMOTE)
  list(APPEND SF_STATIC_DEPS curl)
  string(APPEND SF_PC_REQUIRES_PRIVATE " libcurl")
endif()
set(SF_PC_LIBS_PRIVATE "-lm -lpthread")
if(SF_HAVE_CUDA AND NOT SF_FAKE_CUDA)
  # cudart_static is not on the default search path: name the file.
  get_target_property(SF_CUDART_FILE CUDA::cudart_static IMPORTED_LOCATION)
  list(APPEND SF_STATIC_DEPS ${SF_CUDART_FILE} dl rt)
  string(APPEND SF_PC_LIBS_PRIVATE " ${SF_CUDART_FILE} -ldl -lrt")
endif()
target_link_libraries(shardfeed_static INTERFACE $<INSTALL_INTERFACE:${SF_STATIC_DEPS};Threads::Threads>)

install(TARGETS shardfeed shardfeed_static EXPORT shardfeedTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS shardfeed_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/shardfeed DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

set(SF_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/shardfeed)
install(EXPORT shardfeedTargets NAMESPACE shardfeed:: DESTINATION ${SF_CMAKE_DIR})
configure_package_config_file(cmake/shardfeedConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/shardfeedConfig.cmake INSTALL_DESTINATION ${SF_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/shardfeedConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/shardfeedConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/shardfeedConfigVersion.cmake DESTINATION ${SF_CMAKE_DIR})

configure_file(cmake/shardfeed.pc.in ${CMAKE_CURRENT_BINARY_DIR}/shardfeed.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/shardfeed.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# For programs built against the build tree (never installed): shardfeed.pc
# above holds paths relative to where it is installed, which are wrong here.
configure_file(cmake/shardfeed-uninstalled.pc.in ${CMAKE_CURRENT_BINARY_DIR}/shardfeed-uninstalled.pc @ONLY)

# The man page shardfeed(1): generated from the CLI's help texts at build time
# (docs/man.cmake runs 'shardfeed help --man'), installed in share/man/man1.
set(SF_MAN_PAGE ${CMAKE_CURRENT_BINARY_DIR}/shardfeed.1)
add_custom_command(OUTPUT ${SF_MAN_PAGE}
  COMMAND ${CMAKE_COMMAND} -DCLI=$<TARGET_FILE:shardfeed_cli> -DOUT=${SF_MAN_PAGE}
          -P ${PROJECT_SOURCE_DIR}/docs/man.cmake
  DEPENDS shardfeed_cli ${PROJECT_SOURCE_DIR}/docs/man.cmake
  COMMENT "Generating the man page shardfeed.1" VERBATIM)
add_custom_target(shardfeed_man ALL DEPENDS ${SF_MAN_PAGE})
install(FILES ${SF_MAN_PAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
