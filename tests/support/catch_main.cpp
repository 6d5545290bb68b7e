// tests/support/catch_main.cpp — the one Catch2 main shared by the unit test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
