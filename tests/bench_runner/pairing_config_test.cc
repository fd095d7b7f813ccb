// Pairing configs: the bundled ones parse to what they say, and every kind of mistake is an error
// that names the file, the line and the key, before any weights load.
#include "bench/runner/pairing_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "bench/runner/pairing_check.h"
#include "bench/runner/pairing_run.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen::bench {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kSource = SPECGEN_SOURCE_DIR;
const std::string kTarget = kSource + "/models/tiny-target";
const std::string kDraft = kSource + "/models/tiny-draft";

class PairingConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pairing_config_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    Write("prompts.txt", "def f(x):\n\nclass A:\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::string Path() const { return (dir_ / "c.toml").string(); }
  absl::StatusOr<PairingConfig> Parse(const std::string& text) { return ParsePairingConfig(text, Path()); }
  // A valid config's head: defaults naming the bundled pair and a text prompt set.
  static std::string Head() {
    return "[defaults]\ntarget = \"" + kTarget + "\"\ndraft = \"" + kDraft +
           "\"\ndraft_lengths = [2, 4]\nprompts = \"p\"\n\n[prompts.p]\nfile = \"prompts.txt\"\n\n";
  }
  // The error of parsing `text`, which must fail.
  std::string ErrorOf(const std::string& text) {
    auto config = Parse(text);
    EXPECT_FALSE(config.ok()) << text;
    return config.ok() ? "" : std::string(config.status().message());
  }

  fs::path dir_;
};

TEST_F(PairingConfigTest, BundledConfigParsesAndPassesTheModelCheck) {
  auto config = LoadPairingConfig(kSource + "/configs/bundled.toml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->pairings.size(), 4u);
  const Pairing& greedy = config->pairings[0];
  EXPECT_EQ(greedy.name, "greedy");
  EXPECT_TRUE(greedy.sampling.greedy());
  EXPECT_EQ(greedy.target, fs::path(kTarget).lexically_normal().string());
  ASSERT_EQ(greedy.draft_lengths.size(), 6u);
  EXPECT_EQ(greedy.draft_lengths[2].k, 4);
  EXPECT_TRUE(greedy.draft_lengths[5].adaptive);
  EXPECT_EQ(greedy.draft_lengths[5].Name(), "adaptive8");
  EXPECT_EQ(config->pairings[2].accept, AcceptMode::kCoupled);
  EXPECT_FLOAT_EQ(config->pairings[1].sampling.temperature, 0.8f);
  const Pairing& plain = config->pairings[3];
  EXPECT_TRUE(plain.draft.empty());
  ASSERT_EQ(plain.draft_lengths.size(), 1u);
  EXPECT_EQ(plain.draft_lengths[0].k, 0);
  ASSERT_EQ(config->prompt_sets.size(), 1u);
  const PromptSet& set = config->prompt_sets[plain.prompt_set];
  ASSERT_EQ(set.prompts.size(), 25u);  // models/pair_prompts.json's held-out prompts
  EXPECT_EQ(set.prompts[0].ids.size(), 48u);
  EXPECT_EQ(set.prompts[0].ids[0], 201);
  EXPECT_TRUE(CheckPairingModels(*config).ok());
}

TEST_F(PairingConfigTest, QwenConfigRunsOnlyItsEnabledSynthPairings) {
  auto config = LoadPairingConfig(kSource + "/configs/qwen3-moe.toml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->pairings.size(), 2u);
  EXPECT_EQ(config->pairings[0].target, "synth:qwen3-30b-a3b:bf16");
  EXPECT_EQ(config->pairings[0].vram_budgets, (std::vector<std::string>{"80GiB", "120GiB"}));
  EXPECT_EQ(config->pairings[0].sampling.top_k, 20);
  EXPECT_TRUE(CheckPairingModels(*config).ok());
}

// Issue 45's pairings: gpt-oss-120b with gpt-oss-20b as its draft (one tokenizer, 201088 ids), and
// GLM-4.5-Air alone (its family has no small same-vocabulary model). Their synth pairings run (the
// real ones wait for paths) at the 8 and 24 GiB budgets, and pass the model check: the specs read and
// the draft's vocabulary is the target's.
TEST_F(PairingConfigTest, GptOssConfigPairsThe120bWithThe20b) {
  auto config = LoadPairingConfig(kSource + "/configs/gpt-oss.toml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->pairings.size(), 2u);  // the two with paths to fill in are disabled
  const Pairing& pair = config->pairings[0];
  EXPECT_EQ(pair.name, "synth_gpt-oss-120b_gpt-oss-20b");
  EXPECT_EQ(pair.target, "synth:gpt-oss-120b:q8_0");
  EXPECT_EQ(pair.draft, "synth:gpt-oss-20b:q8_0");
  EXPECT_EQ(pair.vram_budgets, (std::vector<std::string>{"8GiB", "24GiB"}));
  ASSERT_EQ(pair.draft_lengths.size(), 2u);
  EXPECT_EQ(pair.draft_lengths[1].k, 4);
  EXPECT_TRUE(config->pairings[1].draft.empty());  // the 120b alone: what the speedup divides by
  EXPECT_TRUE(CheckPairingModels(*config).ok()) << CheckPairingModels(*config);
}

TEST_F(PairingConfigTest, GlmAirConfigRunsTheTargetAlone) {
  auto config = LoadPairingConfig(kSource + "/configs/glm-4.5-air.toml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->pairings.size(), 1u);
  const Pairing& plain = config->pairings[0];
  EXPECT_EQ(plain.target, "synth:glm-4.5-air:q4_k_m");
  EXPECT_TRUE(plain.draft.empty());
  ASSERT_EQ(plain.draft_lengths.size(), 1u);
  EXPECT_EQ(plain.draft_lengths[0].k, 0);
  EXPECT_EQ(plain.vram_budgets, (std::vector<std::string>{"8GiB", "24GiB"}));
  EXPECT_TRUE(CheckPairingModels(*config).ok()) << CheckPairingModels(*config);
}

// A Qwen3 draft for GLM-4.5-Air speaks another vocabulary (151936 ids against 151552): the model
// check refuses the pairing, which is why the GLM config has none.
TEST_F(PairingConfigTest, QwenDraftForGlmAirFailsTheModelCheck) {
  auto config = Parse("[prompts.p]\nids = [[1, 2, 3]]\n[[pairing]]\nname = \"x\"\n"
                      "target = \"synth:glm-4.5-air:q4_k_m\"\ndraft = \"synth:qwen3-0.6b:q8_0\"\n"
                      "draft_lengths = [2]\nprompts = \"p\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  const absl::Status st = CheckPairingModels(*config);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("vocabulary sizes differ: target 151552, draft 151936"));
}

TEST_F(PairingConfigTest, PromptSetsFromEveryKindOfSource) {
  Write("p.jsonl", "\"def g():\"\n{\"prompt\": \"import os\"}\n{\"ids\": [5, 6, 7]}\n[8, 9]\n");
  Write("p.json", "[\"a\", [1, 2]]");
  auto config = Parse(Head() +
                      "[prompts.j]\nfile = \"p.jsonl\"\n[prompts.k]\nfile = \"p.json\"\n"
                      "[prompts.inline]\ntext = [\"x = 1\", \"y = 2\", \"z = 3\"]\nlimit = 2\n"
                      "[prompts.ids]\nids = [[1, 2, 3]]\n"
                      "[[pairing]]\nname = \"a\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->prompt_sets.size(), 5u);
  auto set = [&](const std::string& name) -> const PromptSet& {
    for (const PromptSet& s : config->prompt_sets) {
      if (s.name == name) return s;
    }
    ADD_FAILURE() << "no prompt set " << name;
    return config->prompt_sets[0];
  };
  const auto& txt = set("p");
  ASSERT_EQ(txt.prompts.size(), 2u);  // the blank line is skipped
  EXPECT_EQ(txt.prompts[1].text, "class A:");
  const auto& jsonl = set("j");
  ASSERT_EQ(jsonl.prompts.size(), 4u);
  EXPECT_EQ(jsonl.prompts[0].text, "def g():");
  EXPECT_EQ(jsonl.prompts[1].text, "import os");
  EXPECT_EQ(jsonl.prompts[2].ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(jsonl.prompts[3].ids, (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(set("k").prompts[1].ids, (std::vector<int32_t>{1, 2}));
  ASSERT_EQ(set("inline").prompts.size(), 2u);  // limit
  EXPECT_EQ(set("inline").prompts[1].text, "y = 2");
  EXPECT_EQ(set("ids").prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(PairingConfigTest, PairingKeysOverrideDefaults) {
  auto config = Parse(Head() + "[[pairing]]\nname = \"a\"\n[[pairing]]\nname = \"b\"\ndraft_lengths = "
                               "\"adaptive\"\nadaptive_max = 5\ntemperature = 0\naccept = \"coupled\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pairings[0].draft_lengths.size(), 2u);
  ASSERT_EQ(config->pairings[1].draft_lengths.size(), 1u);
  EXPECT_EQ(config->pairings[1].draft_lengths[0].Name(), "adaptive5");
  EXPECT_EQ(config->pairings[1].accept, AcceptMode::kCoupled);
  EXPECT_EQ(config->pairings[0].accept, AcceptMode::kRejection);
  EXPECT_EQ(config->pairings[0].vram_budgets, std::vector<std::string>{""});
}

TEST_F(PairingConfigTest, UnknownKeyNamesFileLineAndKey) {
  const std::string error = ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ndraft_length = [4]\n");
  EXPECT_THAT(error, HasSubstr(Path() + ":12: draft_length: unknown key"));
}

TEST_F(PairingConfigTest, UnknownTopLevelAndPromptKeys) {
  EXPECT_THAT(ErrorOf("pairings = 1\n" + Head()), HasSubstr(":1: pairings: unknown key"));
  EXPECT_THAT(ErrorOf(Head() + "[prompts.q]\nfiles = \"x\"\n[[pairing]]\nname = \"a\"\n"),
              HasSubstr(":11: prompts.q.files: unknown key"));
}

TEST_F(PairingConfigTest, WrongTypesAndRanges) {
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ntemperature = \"hot\"\n"),
              HasSubstr(":12: temperature: must be a number, not a string"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ncontext = 1.5\n"),
              HasSubstr(":12: context: must be an integer, not a float"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ndraft_lengths = [2, 0]\n"),
              HasSubstr(":12: draft_lengths: must be in [1, 64], got 0"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ndraft_lengths = [\"fast\"]\n"),
              HasSubstr(":12: draft_lengths: a string entry must be \"adaptive\""));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\naccept = \"maybe\"\n"),
              HasSubstr(":12: accept: must be \"rejection\" or \"coupled\""));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\nvram_budget = \"lots\"\n"),
              HasSubstr(":12: vram_budget:"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ndevice = \"tpu\"\n"),
              HasSubstr(":12: device: must be auto, cpu or cuda"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\nmoe_host = \"sometimes\"\n"),
              HasSubstr(":12: moe_host: must be auto, off or only"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a b\"\n"), HasSubstr(":11: name:"));
}

TEST_F(PairingConfigTest, MissingFilesAreErrorsAtTheirLine) {
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ntarget = \"no-such-model\"\n"),
              HasSubstr(":12: target: '" + (dir_ / "no-such-model").string() + "' not found"));
  EXPECT_THAT(ErrorOf(Head() + "[prompts.q]\nfile = \"missing.jsonl\"\n[[pairing]]\nname = \"a\"\n"),
              HasSubstr(":11: prompts.q.file: " + (dir_ / "missing.jsonl").string() + ": cannot open"));
  // A disabled pairing's models need not exist yet.
  auto config = Parse(Head() + "[[pairing]]\nname = \"a\"\n[[pairing]]\nname = \"b\"\ntarget = \"later\"\n"
                               "enabled = false\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pairings.size(), 1u);
}

TEST_F(PairingConfigTest, BadPromptFilesNameTheirOwnLine) {
  Write("bad.jsonl", "\"ok\"\n{\"prompt\": 3}\n");
  EXPECT_THAT(ErrorOf(Head() + "[prompts.q]\nfile = \"bad.jsonl\"\n[[pairing]]\nname = \"a\"\n"),
              HasSubstr("bad.jsonl:2: a prompt is a string"));
  Write("bad2.jsonl", "{not json\n");
  EXPECT_THAT(ErrorOf(Head() + "[prompts.q]\nfile = \"bad2.jsonl\"\n[[pairing]]\nname = \"a\"\n"),
              HasSubstr("bad2.jsonl:1: not valid JSON"));
  EXPECT_THAT(ErrorOf(Head() + "[prompts.q]\nids = [[1, -2]]\n[[pairing]]\nname = \"a\"\n"),
              HasSubstr(":11: prompts.q.ids: must be in [0,"));
  EXPECT_THAT(ErrorOf(Head() + "[prompts.q]\ntext = [\"a\"]\nids = [[1]]\n[[pairing]]\nname = \"a\"\n"),
              HasSubstr("give exactly one of file, text or ids, got 2"));
}

TEST_F(PairingConfigTest, InconsistentPairings) {
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ndraft = \"none\"\ndraft_lengths = [4]\n"),
              HasSubstr(":13: draft_lengths: given for a pairing without a draft"));
  // From [defaults], draft lengths simply do not apply to a pairing without a draft.
  EXPECT_TRUE(Parse(Head() + "[[pairing]]\nname = \"a\"\ndraft = \"none\"\n").ok());
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\nprompts = \"nope\"\n"),
              HasSubstr(":12: prompts: no prompt set [prompts.nope]"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\n[[pairing]]\nname = \"a\"\n"),
              HasSubstr(":12: name: two pairings are named 'a'"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ndraft_lengths = [4, 4]\n"),
              HasSubstr("draft_lengths: lists 4 twice"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ndevice = \"cpu\"\nvram_budget = \"1GiB\"\n"),
              HasSubstr(":13: vram_budget: given for a pairing on device \"cpu\""));
  EXPECT_THAT(ErrorOf("[[pairing]]\nname = \"a\"\ntarget = \"synth:tiny-moe\"\n"),
              HasSubstr(":1: pairing 'a': needs a draft"));
  EXPECT_THAT(ErrorOf(Head()), HasSubstr("no [[pairing]]"));
}

TEST_F(PairingConfigTest, InvalidTomlNamesTheLine) {
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\nx = 1\n"), HasSubstr(":11: not valid TOML"));
}

TEST_F(PairingConfigTest, DraftWithAnotherVocabularyFailsTheModelCheck) {
  // tiny-moe's vocabulary is 300 ids, the bundled draft's 4096.
  auto config = Parse(Head() + "[[pairing]]\nname = \"a\"\n[[pairing]]\nname = \"b\"\ntarget = "
                               "\"synth:tiny-moe\"\nprompts = \"p\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  const absl::Status status = CheckPairingModels(*config);
  ASSERT_FALSE(status.ok());
  // The draft was set in [defaults], on line 3.
  EXPECT_THAT(std::string(status.message()), HasSubstr(Path() + ":3: draft: pairing 'b': "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("vocabulary sizes differ: target 300, draft 4096"));
}

}  // namespace
}  // namespace specgen::bench

namespace specgen::bench {
namespace {

// Values a sampler or the runner cannot use are refused where they are read, with file, line and key:
// TOML's nan and inf (which pass a `v < 0` check), budgets that name one benchmark twice, and
// max_new_tokens that cannot fit in the context beside a prompt.
TEST_F(PairingConfigTest, NonFiniteDuplicateAndUnfittableValuesNameFileLineAndKey) {
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ntemperature = nan\n"),
              HasSubstr("c.toml:12: temperature: must be a finite number, got nan"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ntemperature = inf\n"),
              HasSubstr(":12: temperature: must be a finite number, got inf"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ntemperature = 1e300\n"),
              HasSubstr(":12: temperature: is too large for a float"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ntop_p = -nan\n"),
              HasSubstr(":12: top_p: must be a finite number"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\nmin_p = +inf\n"),
              HasSubstr(":12: min_p: must be a finite number"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\nvram_budget = [\"8GiB\", \"8192MiB\"]\n"),
              HasSubstr(":12: vram_budget: lists \"8GiB\" and \"8192MiB\", the same size (each"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\nvram_budget = [\"1GiB\", \"1GiB\"]\n"),
              HasSubstr(":12: vram_budget: lists \"1GiB\" twice"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\nvram_budget = \"0GiB\"\n"),
              HasSubstr(":12: vram_budget: \"0GiB\" is 0 bytes"));
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ncontext = 64\nmax_new_tokens = 1000\n"),
              HasSubstr(":13: max_new_tokens: pairing 'a': max_new_tokens 1000 does not fit in a context of 64"));
  // A context lowered below the default max_new_tokens (64) is named at the context's line.
  EXPECT_THAT(ErrorOf(Head() + "[[pairing]]\nname = \"a\"\ncontext = 32\n"),
              HasSubstr(":12: context: pairing 'a': max_new_tokens 64 does not fit in a context of 32"));
}

TEST_F(PairingConfigTest, PromptFileThatIsNoRegularFileIsRefused) {
  fs::create_directories(dir_ / "adir");
  EXPECT_THAT(ErrorOf(Head() + "[prompts.q]\nfile = \"adir\"\n[[pairing]]\nname = \"a\"\n"),
              HasSubstr("adir: not a regular file (a directory)"));
  EXPECT_THAT(ErrorOf(Head() + "[prompts.q]\nfile = \"/dev/zero\"\n[[pairing]]\nname = \"a\"\n"),
              HasSubstr("/dev/zero: not a regular file (a device, FIFO or socket)"));
}

// The seeds of fuzz_pairing_config (tests/data/fuzz/), replayed as the fuzzer reads them: each parses,
// and holds only values the runner can use (what the fuzz target asserts of every accepted input).
// Acceptance regimes and the modelled draft length: parsed into the pairing, named in benchmarks, and
// refused with the file, line and key where they cannot apply.
TEST_F(PairingConfigTest, AcceptanceRegimesAndModelledLengths) {
  auto config = Parse(Head() + "[[pairing]]\nname = \"g\"\ntemperature = 0.0\n"
                               "draft_lengths = [2, \"adaptive\", \"modelled\"]\n"
                               "acceptance = [\"real\", \"typical\", \"flat:0.6\", \"0.9,0.5\"]\n");
  ASSERT_TRUE(config.ok()) << config.status();
  const Pairing& g = config->pairings[0];
  EXPECT_EQ(g.acceptances, (std::vector<std::string>{"", "typical", "flat:0.6", "0.9,0.5"}));
  ASSERT_EQ(g.draft_lengths.size(), 3u);
  EXPECT_TRUE(g.draft_lengths[2].modelled && g.draft_lengths[2].adaptive);
  EXPECT_EQ(g.draft_lengths[2].Name(), "modelled8");
  RunSpec spec;
  spec.pairing = &g;
  spec.length = g.draft_lengths[0];
  spec.acceptance = "flat:0.6";
  spec.backend.budget = "8GiB";
  EXPECT_EQ(BenchmarkName(spec), "g/k:2/budget:8GiB/accept:flat:0.6");
  EXPECT_EQ(BenchmarkName(WithoutDraft(spec)), "g/k:0/budget:8GiB");
  // Defaults' regimes do not apply to a pairing without a draft.
  std::string head = Head();
  head.insert(head.find('\n') + 1, "acceptance = \"typical\"\ntemperature = 0.0\n");
  config = Parse(head + "[[pairing]]\nname = \"g\"\n[[pairing]]\nname = \"alone\"\ndraft = \"none\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pairings[0].acceptances, std::vector<std::string>{"typical"});
  EXPECT_EQ(config->pairings[1].acceptances, std::vector<std::string>{""});
}

// configs/acceptance-grid.toml, issue 43's grid: 4 budgets x 6 draft lengths x 4 acceptance regimes x 3
// routing regimes.
TEST_F(PairingConfigTest, AcceptanceGridConfigParses) {
  auto config = LoadPairingConfig(kSource + "/configs/acceptance-grid.toml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->pairings.size(), 1u);
  const Pairing& g = config->pairings[0];
  EXPECT_EQ(g.vram_budgets.size(), 4u);
  EXPECT_EQ(g.draft_lengths.size(), 6u);
  EXPECT_EQ(g.acceptances, (std::vector<std::string>{"", "typical", "flat:0.6", "flat:0.9"}));
  EXPECT_EQ(g.routings, (std::vector<std::string>{"", "locality", "uniform"}));
  EXPECT_TRUE(g.sampling.greedy());
}

TEST_F(PairingConfigTest, AcceptanceRegimeMistakes) {
  const std::string pairing = "[[pairing]]\nname = \"g\"\n";
  EXPECT_THAT(ErrorOf(Head() + pairing + "temperature = 0.0\nacceptance = \"often\"\n"),
              HasSubstr("c.toml:13: acceptance: profile 'often'"));
  EXPECT_THAT(ErrorOf(Head() + pairing + "temperature = 0.0\nacceptance = [\"typical\", \"typical\"]\n"),
              HasSubstr("lists \"typical\" twice"));
  EXPECT_THAT(ErrorOf(Head() + pairing + "temperature = 0.0\nacceptance = [\"0.9,1.5\"]\n"),
              HasSubstr("value 2 ('1.5')"));
  EXPECT_THAT(ErrorOf(Head() + pairing + "temperature = 0.8\nacceptance = \"typical\"\n"),
              HasSubstr("greedy only"));
  EXPECT_THAT(ErrorOf(Head() + pairing + "draft = \"none\"\nacceptance = \"typical\"\n"),
              HasSubstr("acceptance regimes need a draft"));
  EXPECT_THAT(ErrorOf(Head() + pairing + "draft_lengths = [\"bytes\"]\n"),
              HasSubstr("\"adaptive\" or \"modelled\""));
}

// The routing regimes' axis: "own" is the target's router (the empty name), the others name their
// trace; every run and its target-alone baseline carry the regime.
TEST_F(PairingConfigTest, RoutingRegimesMultiplyTheRuns) {
  auto config = Parse(Head() + "[[pairing]]\nname = \"g\"\nrouting = [\"own\", \"locality\", \"uniform\"]\n");
  ASSERT_TRUE(config.ok()) << config.status();
  const Pairing& g = config->pairings[0];
  EXPECT_EQ(g.routings, (std::vector<std::string>{"", "locality", "uniform"}));
  RunSpec spec;
  spec.pairing = &g;
  spec.length = g.draft_lengths[0];
  spec.routing = "locality";
  spec.acceptance = "typical";
  EXPECT_EQ(BenchmarkName(spec), "g/k:2/routing:locality/accept:typical");
  EXPECT_EQ(BenchmarkName(WithoutDraft(spec)), "g/k:0/routing:locality");
  RunSpec own = spec;
  own.routing.clear();
  EXPECT_NE(BaselineKey(spec), BaselineKey(own)) << "each regime is measured against its own target alone";
  EXPECT_EQ(Parse(Head() + "[[pairing]]\nname = \"g\"\n")->pairings[0].routings, std::vector<std::string>{""});
  // Mistakes name the line and the key.
  const std::string pairing = "[[pairing]]\nname = \"g\"\n";
  EXPECT_THAT(ErrorOf(Head() + pairing + "routing = \"lru\"\n"), HasSubstr("c.toml:12: routing"));
  EXPECT_THAT(ErrorOf(Head() + pairing + "routing = [\"own\", \"own\"]\n"), HasSubstr("lists \"own\" twice"));
  EXPECT_THAT(ErrorOf(Head() + pairing + "routing = []\n"), HasSubstr("is empty"));
  EXPECT_THAT(ErrorOf(Head() + pairing + "routing = 3\n"), HasSubstr("routing"));
}

TEST(PairingConfigFuzzSeeds, ParseToUsableConfigs) {
  const fs::path dir = fs::path(SPECGEN_SOURCE_DIR) / "tests/data/fuzz/fuzz_pairing_config";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto config = ParsePairingConfig(text, "/nonexistent-fuzz-dir/pairing.toml");
    if (e.path().filename().string().rfind("seed-", 0) == 0) {
      EXPECT_TRUE(config.ok()) << e.path() << ": " << config.status();
    }
    ++n;
    if (!config.ok()) continue;
    for (const Pairing& p : config->pairings) {
      EXPECT_LT(p.max_new_tokens, p.context) << e.path();
      EXPECT_TRUE(std::isfinite(p.sampling.temperature)) << e.path();
      EXPECT_FALSE(p.draft_lengths.empty()) << e.path();
    }
  }
  EXPECT_GE(n, 2) << "seeds missing from " << dir;
}

}  // namespace
}  // namespace specgen::bench
