# Finds the external packages sdrt builds on and sets SDRT_HAVE_{CUDA,NCCL,MPI}.
# Everything comes from Debian packages (scripts/install-deps.sh) except the CUDA
# toolkit and NCCL, which live under /usr/local/cuda (or CUDAToolkit_ROOT).

find_package(absl REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(dlpack REQUIRED)
find_package(Threads REQUIRED)

# xxhash ships no CMake config in Debian; libxxhash-dev has the header and .so.
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
add_library(sdrt_xxhash INTERFACE)
target_include_directories(sdrt_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(sdrt_xxhash INTERFACE ${XXHASH_LIBRARY})

# RE2 (PLAN.json patterns: linear time, no recursion) ships no CMake config in Debian
# bookworm; libre2-dev has the headers and .so.
find_path(RE2_INCLUDE_DIR re2/re2.h REQUIRED)
find_library(RE2_LIBRARY re2 REQUIRED)
add_library(sdrt_re2 INTERFACE)
target_include_directories(sdrt_re2 SYSTEM INTERFACE ${RE2_INCLUDE_DIR})
target_link_libraries(sdrt_re2 INTERFACE ${RE2_LIBRARY})

function(sdrt_resolve_option name found)
  if(${name} STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "${name}=ON but the dependency was not found")
  endif()
endfunction()

# --- CUDA --------------------------------------------------------------------
set(SDRT_HAVE_CUDA OFF)
if(NOT SDRT_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Ampere and Hopper SASS, plus sm_90 PTX for newer cards.
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
    endif()
    # One CUDA runtime in every binary: the shared libcudart (CUDA::cudart) that
    # sdrt_cuda links, not nvcc's default static copy beside it.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(SDRT_HAVE_CUDA ON)
  endif()
  sdrt_resolve_option(SDRT_WITH_CUDA SDRT_HAVE_CUDA)
endif()

# --- NCCL (needs CUDA) -------------------------------------------------------
set(SDRT_HAVE_NCCL OFF)
if(SDRT_HAVE_CUDA AND NOT SDRT_WITH_NCCL STREQUAL "OFF")
  find_package(NCCL QUIET)  # third_party/cmake/FindNCCL.cmake: the imported target NCCL::NCCL
  if(NCCL_FOUND)
    set(SDRT_HAVE_NCCL ON)
  endif()
endif()
sdrt_resolve_option(SDRT_WITH_NCCL SDRT_HAVE_NCCL)

# --- MPI ---------------------------------------------------------------------
set(SDRT_HAVE_MPI OFF)
if(NOT SDRT_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(SDRT_HAVE_MPI ON)
  endif()
  sdrt_resolve_option(SDRT_WITH_MPI SDRT_HAVE_MPI)
endif()

if(SDRT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(SDRT_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# Warnings for sdrt's own targets.
function(sdrt_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()
