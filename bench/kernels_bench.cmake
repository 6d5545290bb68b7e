# Kernel micro benchmark (plain main, no Google Benchmark). Included from bench/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/kernels_bench.cmake)
# Needs targets colibri_kernels and colibri_core (core/util/thread_pool.cpp).
find_package(Threads REQUIRED)
add_executable(kernels_bench ${CMAKE_CURRENT_LIST_DIR}/kernels_bench.cpp)
target_link_libraries(kernels_bench PRIVATE colibri_core colibri_kernels colibri_probe Threads::Threads)
