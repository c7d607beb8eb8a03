# The library users link: sdrt (sdrt::sdrt), made of the layer libraries' object files
# (compiled once, with hidden visibility, for both). Static by default; with
# BUILD_SHARED_LIBS=ON it is libsdrt.so.<SDRT_ABI_VERSION>, exporting only the public API:
# what base/export.h's SDRT_API marks, filtered by the version script libsdrt.map (sdrt::
# C++ symbols, the C API's sdrt_* functions). Third-party libraries sdrt uses inside
# (nlohmann-json, RE2, xxhash, MPI, CUDA, NCCL) are private: in a static build they are only
# listed for the final link, and in a shared build they are not part of what a user links.
set(SDRT_LAYER_LIBRARIES sdrt_tensor sdrt_cuda sdrt_comm sdrt_state_dict sdrt_io sdrt_checkpoint
  sdrt_distributed sdrt_core sdrt_c_api)

# Makes `name`, a STATIC or SHARED library of the layers' object files, as described above.
# Besides sdrt itself, a static build's tests make the shared one the Python module loads
# (tests/CMakeLists.txt): one more link of the same objects, not another build.
function(sdrt_add_library name type)
  add_library(${name} ${type})
  foreach(layer ${SDRT_LAYER_LIBRARIES})
    target_sources(${name} PRIVATE $<TARGET_OBJECTS:${layer}>)
  endforeach()
  set_target_properties(${name} PROPERTIES LINKER_LANGUAGE CXX)
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${SDRT_INCLUDE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated> $<INSTALL_INTERFACE:include>)
  target_compile_features(${name} PUBLIC cxx_std_17)
  # What the public headers include: Abseil's Status and containers, DLPack.
  target_link_libraries(${name} PUBLIC absl::status absl::statusor absl::strings
    absl::str_format absl::span absl::inlined_vector absl::synchronization absl::flat_hash_map
    dlpack::dlpack Threads::Threads)
  # Header-only inside sdrt: nothing to link, in the build tree only.
  target_link_libraries(${name} PRIVATE $<BUILD_INTERFACE:nlohmann_json::nlohmann_json>)
  # RE2 and xxhash have no CMake package on Debian: their library files, by path.
  target_link_libraries(${name} PRIVATE ${RE2_LIBRARY} ${XXHASH_LIBRARY} rt)
  if(SDRT_HAVE_MPI)
    # By path for the installed package: MPI::MPI_C needs the C language enabled in the
    # program's project, which a C++ program need not have (no MPI header is public).
    target_link_libraries(${name} PRIVATE $<BUILD_INTERFACE:MPI::MPI_C>
      $<INSTALL_INTERFACE:${MPI_C_LIBRARIES}>)
  endif()
  if(SDRT_HAVE_CUDA)
    target_link_libraries(${name} PRIVATE CUDA::cudart)
  endif()
  if(SDRT_HAVE_NCCL)
    target_link_libraries(${name} PRIVATE NCCL::NCCL)
  endif()
  if(type STREQUAL "SHARED")
    set(script ${PROJECT_SOURCE_DIR}/third_party/cmake/libsdrt.map)
    target_link_options(${name} PRIVATE "LINKER:--version-script=${script}"
      "LINKER:--no-undefined")
    set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS ${script})
  elseif(SDRT_HAVE_CUDA)
    # Keep cuda/cuda_backend.cc's static registration in a program linking libsdrt.a.
    target_link_options(${name} INTERFACE "LINKER:--undefined=sdrt_cuda_backend_anchor")
  endif()
endfunction()

if(BUILD_SHARED_LIBS)
  sdrt_add_library(sdrt SHARED)
else()
  sdrt_add_library(sdrt STATIC)
endif()
add_library(sdrt::sdrt ALIAS sdrt)
set_target_properties(sdrt PROPERTIES EXPORT_NAME sdrt VERSION ${PROJECT_VERSION}
  SOVERSION ${SDRT_ABI_VERSION})
