// tests/support/fifo_guard.h — runs a call that must refuse a FIFO at once. Should it still be
// running after 20 s (blocked opening the FIFO for a writer that never comes: the bug the
// callers pin down), the test fails and the FIFO's write end is opened, so that the blocked
// open returns and the test ends instead of hanging.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <utility>

namespace colibri::testing {

template <class Fn>
auto call_refusing_fifo(const std::string &fifo, Fn fn) {
  auto result = std::async(std::launch::async, std::move(fn));
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    FAIL_CHECK("blocked opening the FIFO " << fifo);
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // lets the blocked open return
    result.wait();
    if (writer >= 0) ::close(writer);
  }
  return result.get();
}

}  // namespace colibri::testing
