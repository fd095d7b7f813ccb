// The main of every test binary: GoogleTest's, plus a temporary directory of this process's own.
//
// ctest runs each test case as its own process, two or more at once, and many cases write their
// fixtures under ::testing::TempDir() with names that name the model, not the case (two cases of
// one suite exporting the same model would overwrite each other's file mid-read). Pointing
// TEST_TMPDIR at a fresh mkdtemp directory makes every process's TempDir() private, so no test has
// to invent a unique name; the directory and what is in it are removed when the tests end. If the
// directory cannot be made the run stops with the reason rather than sharing one.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

int main(int argc, char** argv) {
  const char* base = std::getenv("TMPDIR");
  std::string dir = std::string(base && *base ? base : "/tmp") + "/specgen_test.XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    std::fprintf(stderr, "test_main: cannot make a temporary directory %s: %s\n", dir.c_str(),
                 std::strerror(errno));
    return 2;
  }
  ::setenv("TEST_TMPDIR", (dir + "/").c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}
