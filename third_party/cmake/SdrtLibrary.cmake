# The library users link: sdrt (sdrt::sdrt), made of the layer libraries' object files
# (compiled once, with hidden visibility, for both). Static by default; with
# BUILD_SHARED_LIBS=ON it is libsdrt.so.<SDRT_ABI_VERSION>, exporting only the public API:
# what base/export.h's SDRT_API marks, filtered by the version script libsdrt.map (sdrt::
# C++ symbols, the C API's sdrt_* functions). Third-party libraries sdrt uses inside
# (nlohmann-json, RE2, xxhash, MPI, CUDA, NCCL) are private: in a static build they are only
# listed for the final link, and in a shared build they are not part of what a user links.
set(SDRT_LAYER_LIBRARIES sdrt_tensor sdrt_cuda sdrt_comm sdrt_state_dict sdrt_io sdrt_checkpoint
  sdrt_distributed sdrt_core sdrt_c_api)

add_library(sdrt)
add_library(sdrt::sdrt ALIAS sdrt)
foreach(layer ${SDRT_LAYER_LIBRARIES})
  target_sources(sdrt PRIVATE $<TARGET_OBJECTS:${layer}>)
endforeach()
set_target_properties(sdrt PROPERTIES LINKER_LANGUAGE CXX EXPORT_NAME sdrt
  VERSION ${PROJECT_VERSION} SOVERSION ${SDRT_ABI_VERSION})
target_include_directories(sdrt PUBLIC $<BUILD_INTERFACE:${SDRT_INCLUDE_DIR}>
  $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated> $<INSTALL_INTERFACE:include>)
target_compile_features(sdrt PUBLIC cxx_std_17)
# What the public headers include: Abseil's Status and containers, DLPack.
target_link_libraries(sdrt PUBLIC absl::status absl::statusor absl::strings absl::str_format
  absl::span absl::inlined_vector absl::synchronization absl::flat_hash_map dlpack::dlpack
  Threads::Threads)
# Header-only inside sdrt: nothing to link, in the build tree only.
target_link_libraries(sdrt PRIVATE $<BUILD_INTERFACE:nlohmann_json::nlohmann_json>)
# RE2 and xxhash have no CMake package on Debian: their library files, by path.
target_link_libraries(sdrt PRIVATE ${RE2_LIBRARY} ${XXHASH_LIBRARY} rt)
if(SDRT_HAVE_MPI)
  # By path for the installed package: MPI::MPI_C needs the C language enabled in the
  # program's project, which a C++ program need not have (no MPI header is public).
  target_link_libraries(sdrt PRIVATE $<BUILD_INTERFACE:MPI::MPI_C>
    $<INSTALL_INTERFACE:${MPI_C_LIBRARIES}>)
endif()
if(SDRT_HAVE_CUDA)
  target_link_libraries(sdrt PRIVATE CUDA::cudart)
endif()
if(SDRT_HAVE_NCCL)
  target_link_libraries(sdrt PRIVATE NCCL::NCCL)
endif()
if(BUILD_SHARED_LIBS)
  set(SDRT_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/libsdrt.map)
  target_link_options(sdrt PRIVATE "LINKER:--version-script=${SDRT_VERSION_SCRIPT}"
    "LINKER:--no-undefined")
  set_property(TARGET sdrt APPEND PROPERTY LINK_DEPENDS ${SDRT_VERSION_SCRIPT})
elseif(SDRT_HAVE_CUDA)
  # Keep cuda/cuda_backend.cc's static registration in a program linking libsdrt.a.
  target_link_options(sdrt INTERFACE "LINKER:--undefined=sdrt_cuda_backend_anchor")
endif()
