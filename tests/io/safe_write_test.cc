// SafeFileWriter: the target changes only on Commit, never half-written; nothing but a regular file
// is replaced; no input is overwritten, whichever name (symlink, hard link, folder) it is reached by;
// a symlink planted where a temporary file might go is never followed.
#include "engine/io/safe_write.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace specgen {
namespace {

class SafeWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/safe_write_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static void Put(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  static std::string Get(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Names in the folder, so that a test can see that no temporary file is left behind.
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir_.c_str());
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    return names;
  }
  static SafeWriteOptions Inputs(std::vector<std::string> inputs) {
    SafeWriteOptions o;
    o.inputs = std::move(inputs);
    return o;
  }
  static SafeWriteOptions Labelled(std::string label) {
    SafeWriteOptions o;
    o.label = std::move(label);
    return o;
  }
  static absl::Status WriteText(const std::string& path, const std::string& text,
                                const SafeWriteOptions& options = {}) {
    return WriteFileSafely(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}, options);
  }

  std::string dir_;
};

TEST_F(SafeWriteTest, WritesNewFileAndReplacesRegularFile) {
  ASSERT_TRUE(WriteText(Path("out"), "first").ok());
  EXPECT_EQ(Get(Path("out")), "first");
  ASSERT_TRUE(WriteText(Path("out"), "second, longer").ok());
  EXPECT_EQ(Get(Path("out")), "second, longer");
  EXPECT_EQ(Entries(), std::vector<std::string>{"out"});
}

TEST_F(SafeWriteTest, LargeWritesBypassingTheBufferKeepEveryByte) {
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  auto w = SafeFileWriter::Create(Path("big"));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Write("ab", 2).ok());                     // buffered
  ASSERT_TRUE(w->Write(big.data(), big.size()).ok());      // fills, flushes, then goes direct
  ASSERT_TRUE(w->WriteZeros(5).ok());
  EXPECT_EQ(w->written(), big.size() + 7);
  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(Get(Path("big")), "ab" + big + std::string(5, '\0'));
}

TEST_F(SafeWriteTest, TargetUntouchedUntilCommitAndTempRemovedWhenAbandoned) {
  Put(Path("out"), "old");
  {
    auto w = SafeFileWriter::Create(Path("out"));
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->Write("new", 3).ok());
    EXPECT_EQ(Get(Path("out")), "old");
    EXPECT_EQ(w->temp_path().rfind(dir_ + "/", 0), 0u) << "temporary file must be beside the target";
  }  // destroyed without Commit
  EXPECT_EQ(Get(Path("out")), "old");
  EXPECT_EQ(Entries(), std::vector<std::string>{"out"});
}

TEST_F(SafeWriteTest, TemporaryNamesAreUnique) {
  auto a = SafeFileWriter::Create(Path("out"));
  auto b = SafeFileWriter::Create(Path("out"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->temp_path(), b->temp_path());
}

TEST_F(SafeWriteTest, PlantedSymlinkAtTheOldFixedTempNameIsNotFollowed) {
  Put(Path("victim"), "precious");
  ASSERT_EQ(::symlink(Path("victim").c_str(), Path("out.tmp").c_str()), 0);
  ASSERT_TRUE(WriteText(Path("out"), "logits").ok());
  EXPECT_EQ(Get(Path("victim")), "precious");
  EXPECT_EQ(Get(Path("out")), "logits");
}

TEST_F(SafeWriteTest, RefusesDirectoryAndFifoTargets) {
  ASSERT_EQ(::mkdir(Path("d").c_str(), 0755), 0);
  absl::Status s = WriteText(Path("d"), "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("is a directory"), std::string::npos) << s;

  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0644), 0);
  s = WriteText(Path("fifo"), "x", Labelled("--out fifo"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("--out fifo"), std::string::npos) << s;
  EXPECT_NE(s.message().find("FIFO"), std::string::npos) << s;
  struct stat st;
  ASSERT_EQ(::lstat(Path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(SafeWriteTest, RefusesEveryNameOfAnInput) {
  Put(Path("model.gguf"), "weights");
  ASSERT_EQ(::symlink(Path("model.gguf").c_str(), Path("via_link").c_str()), 0);
  ASSERT_EQ(::link(Path("model.gguf").c_str(), Path("hard_link").c_str()), 0);
  const SafeWriteOptions opt = Inputs({Path("model.gguf")});
  for (const char* name : {"model.gguf", "via_link", "hard_link"}) {
    absl::Status s = WriteText(Path(name), "logits", opt);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << name << ": " << s;
    EXPECT_NE(s.message().find("same file as the input"), std::string::npos) << s;
  }
  // The input named through a symlink is caught as well.
  const SafeWriteOptions via = Inputs({Path("via_link")});
  EXPECT_FALSE(WriteText(Path("model.gguf"), "logits", via).ok());
  EXPECT_EQ(Get(Path("model.gguf")), "weights");
}

TEST_F(SafeWriteTest, InputFolderCoversItsFiles) {
  ASSERT_EQ(::mkdir(Path("hf").c_str(), 0755), 0);
  Put(Path("hf/model.safetensors"), "weights");
  const SafeWriteOptions opt = Inputs({Path("hf")});
  EXPECT_FALSE(WriteText(Path("hf/model.safetensors"), "x", opt).ok());
  EXPECT_EQ(Get(Path("hf/model.safetensors")), "weights");
  EXPECT_TRUE(WriteText(Path("hf/out.gguf"), "x", opt).ok());  // a new file in the folder is fine
}

TEST_F(SafeWriteTest, SymlinkTargetIsWrittenThroughAndTheLinkKept) {
  Put(Path("real"), "old");
  ASSERT_EQ(::symlink("real", Path("link").c_str()), 0);
  ASSERT_TRUE(WriteText(Path("link"), "new").ok());
  struct stat st;
  ASSERT_EQ(::lstat(Path("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(Get(Path("real")), "new");
}

TEST_F(SafeWriteTest, DanglingSymlinkAndMissingFolderAreErrors) {
  ASSERT_EQ(::symlink(Path("nowhere/x").c_str(), Path("dangling").c_str()), 0);
  EXPECT_FALSE(WriteText(Path("dangling"), "x").ok());
  absl::Status s = WriteText(Path("no_such_dir/out"), "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("temporary file"), std::string::npos) << s;
}

TEST_F(SafeWriteTest, ReplacingKeepsPermissionsNewFileGetsOptionMode) {
  Put(Path("out"), "old");
  ASSERT_EQ(::chmod(Path("out").c_str(), 0600), 0);
  ASSERT_TRUE(WriteText(Path("out"), "new").ok());
  struct stat st;
  ASSERT_EQ(::stat(Path("out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(WriteText(Path("fresh"), "new").ok());
  ASSERT_EQ(::stat(Path("fresh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(SafeWriteTest, TargetThatBecomesAnInputBeforeCommitIsNotReplaced) {
  auto w = SafeFileWriter::Create(Path("out"), Inputs({Path("in")}));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Write("x", 1).ok());
  Put(Path("in"), "input");
  ASSERT_EQ(::link(Path("in").c_str(), Path("out").c_str()), 0);  // out now is the input
  EXPECT_FALSE(w->Commit().ok());
  EXPECT_EQ(Get(Path("in")), "input");
  EXPECT_EQ(Entries().size(), 2u);  // in, out; no temporary file
}

}  // namespace
}  // namespace specgen
