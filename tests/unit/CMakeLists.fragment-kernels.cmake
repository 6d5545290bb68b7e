# Kernel, thread-pool and probe unit tests. Included from tests/CMakeLists.txt with
#   include(${CMAKE_CURRENT_SOURCE_DIR}/unit/CMakeLists.fragment-kernels.cmake)
# Needs: targets colibri_kernels and colibri_core (which compiles core/util/thread_pool.cpp),
# and find_package(Catch2 2 REQUIRED) done by the includer or here.
if(NOT TARGET Catch2::Catch2WithMain)
  find_package(Catch2 2 REQUIRED)
endif()
find_package(Threads REQUIRED)

set(_colibri_kernels_unit_dir ${CMAKE_CURRENT_LIST_DIR})

add_executable(kernels_tests
  ${_colibri_kernels_unit_dir}/kernels_matmul_test.cpp
  ${_colibri_kernels_unit_dir}/kernels_elementwise_test.cpp
  ${_colibri_kernels_unit_dir}/kernels_quantize_test.cpp)
target_link_libraries(kernels_tests PRIVATE colibri_kernels Catch2::Catch2WithMain)
add_test(NAME kernels_tests COMMAND kernels_tests)

add_executable(thread_pool_tests ${_colibri_kernels_unit_dir}/thread_pool_test.cpp)
target_link_libraries(thread_pool_tests PRIVATE colibri_core colibri_kernels Catch2::Catch2WithMain Threads::Threads)
add_test(NAME thread_pool_tests COMMAND thread_pool_tests)

# bench/probe's range reader (engine_bench --moe-vs-read compares the engine with it).
add_executable(probe_tests ${_colibri_kernels_unit_dir}/probe_test.cpp)
target_link_libraries(probe_tests PRIVATE colibri_probe Catch2::Catch2WithMain)
add_test(NAME probe_tests COMMAND probe_tests)
