// tests/support/in_child.h — runs part of a test in a forked child, for what is process-wide
// and cannot be undone (setrlimit, setuid, chmod checks as another user): the child's function
// returns a string the parent gets back, and the child must exit normally with status 0, so a
// crash or a std::terminate in it fails the test instead of passing unseen.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <functional>
#include <string>

namespace colibri::testing {

inline std::string in_child(const std::function<std::string()> &fn) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    const std::string out = fn();
    const ssize_t w = write(fds[1], out.data(), out.size());
    _exit(w < 0 ? 2 : 0);
  }
  close(fds[1]);
  std::string message;
  char buf[1024];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) message.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  INFO(message);
  REQUIRE(WIFEXITED(status));  // not killed (a crash, std::terminate)
  REQUIRE(WEXITSTATUS(status) == 0);
  return message;
}

// In a child: root ignores permission bits and RLIMIT_NPROC, so a test of either drops to
// 'nobody' first. True when the process is not root or the drop worked.
inline bool drop_root_privileges() { return geteuid() != 0 || (setgid(65534) == 0 && setuid(65534) == 0); }

}  // namespace colibri::testing
