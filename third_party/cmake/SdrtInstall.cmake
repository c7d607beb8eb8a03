# `cmake --install`: the headers under include/sdrt/, the library, the `sdrt` tool, the CMake
# package (lib/cmake/sdrt: sdrtConfig.cmake, sdrtConfigVersion.cmake, sdrtTargets.cmake and,
# with NCCL, FindNCCL.cmake) and lib/pkgconfig/sdrt.pc. docs/ARCHITECTURE.md, "Installing
# and embedding".
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The headers: every public header of tensor/, cuda/, comm/ and core/ (those outside
# internal/), and whatever they include of sdrt, internal/ headers included, found by
# following their `#include "sdrt/..."` lines. Nothing of tests/, tools/ or bench/.
file(GLOB_RECURSE sdrt_headers RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/tensor/*.h ${PROJECT_SOURCE_DIR}/cuda/*.h
  ${PROJECT_SOURCE_DIR}/comm/*.h ${PROJECT_SOURCE_DIR}/core/*.h)
list(FILTER sdrt_headers EXCLUDE REGEX "(^|/)internal/")
# sdrt/c_api.h is installed below (the C API includes only DLPack), and so are base/'s
# sdrt/sdrt.h and sdrt/export.h.
list(REMOVE_ITEM sdrt_headers core/c_api/c_api.h)
set(sdrt_pending ${sdrt_headers})
set(sdrt_installed_headers "")
while(sdrt_pending)
  list(POP_FRONT sdrt_pending header)
  if(header IN_LIST sdrt_installed_headers)
    continue()
  endif()
  list(APPEND sdrt_installed_headers ${header})
  file(STRINGS ${PROJECT_SOURCE_DIR}/${header} includes REGEX "^#include \"sdrt/[a-z]+/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"sdrt/([^\"]+)\".*" "\\1" included "${line}")
    if(NOT included MATCHES "^(tensor|cuda|comm|core)/")
      message(FATAL_ERROR "${header} includes sdrt/${included}, which is not installed")
    endif()
    list(APPEND sdrt_pending ${included})
  endforeach()
endwhile()
foreach(header ${sdrt_installed_headers})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sdrt/${dir})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/base/sdrt.h ${PROJECT_SOURCE_DIR}/base/export.h
  ${PROJECT_SOURCE_DIR}/core/c_api/c_api.h
  ${PROJECT_BINARY_DIR}/generated/sdrt/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sdrt)

install(TARGETS sdrt EXPORT sdrtTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# bin/sdrt: tools/sdrt/CMakeLists.txt.

set(SDRT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sdrt)
install(EXPORT sdrtTargets NAMESPACE sdrt:: DESTINATION ${SDRT_CMAKE_DIR})
if(BUILD_SHARED_LIBS)
  set(SDRT_LIBRARY_KIND shared)
else()
  set(SDRT_LIBRARY_KIND static)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/sdrtConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sdrtConfig.cmake INSTALL_DESTINATION ${SDRT_CMAKE_DIR})
# 0.x releases: a new minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sdrtConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sdrtConfig.cmake ${PROJECT_BINARY_DIR}/sdrtConfigVersion.cmake
  DESTINATION ${SDRT_CMAKE_DIR})
if(SDRT_HAVE_NCCL)
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/FindNCCL.cmake DESTINATION ${SDRT_CMAKE_DIR})
endif()

# pkg-config: Requires/Libs are what a program compiled against the headers links; the
# private ones are what a static libsdrt.a needs besides (`pkg-config --static`).
set(SDRT_PC_REQUIRES "absl_status absl_statusor absl_strings absl_str_format absl_span")
string(APPEND SDRT_PC_REQUIRES " absl_inlined_vector absl_synchronization absl_flat_hash_map")
set(SDRT_PC_REQUIRES_PRIVATE "re2 libxxhash")
get_target_property(dlpack_includes dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)
set(SDRT_PC_CFLAGS "")
foreach(dir ${dlpack_includes})
  if(NOT dir STREQUAL "/usr/include")
    string(APPEND SDRT_PC_CFLAGS " -I${dir}")
  endif()
endforeach()
set(SDRT_PC_LIBS_PRIVATE "")
if(SDRT_HAVE_MPI)
  foreach(lib ${MPI_C_LIBRARIES})
    string(APPEND SDRT_PC_LIBS_PRIVATE " ${lib}")
  endforeach()
endif()
if(SDRT_HAVE_NCCL)
  string(APPEND SDRT_PC_LIBS_PRIVATE " ${NCCL_LIBRARY}")
endif()
if(SDRT_HAVE_CUDA)
  string(APPEND SDRT_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
endif()
string(APPEND SDRT_PC_LIBS_PRIVATE " -lrt -pthread")
set(SDRT_PC_LIBS "-L\${libdir} -lsdrt -pthread")
if(NOT BUILD_SHARED_LIBS AND SDRT_HAVE_CUDA)
  string(APPEND SDRT_PC_LIBS " -Wl,--undefined=sdrt_cuda_backend_anchor")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/sdrt.pc.in ${PROJECT_BINARY_DIR}/sdrt.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/sdrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The Python module over the C API (tools/python/sdrt, ctypes), with a shared library only:
# lib/sdrt/python/sdrt, which finds lib/libsdrt.so from where it lies.
if(BUILD_SHARED_LIBS)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/tools/python/sdrt
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/sdrt/python FILES_MATCHING PATTERN "*.py")
endif()
