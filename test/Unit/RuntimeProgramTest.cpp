//===- RuntimeProgramTest.cpp - programs: validation and plans ------------===//

#include "coat/Runtime/Manifest.h"
#include "coat/Runtime/coat_manifest.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

using namespace coat::rt;

namespace {

// A hand-written fixture in the shape of docs/manifest.md, "Programs" (not
// compiler output): a forward that quantizes x to 1x16 groups and a norm-like
// backward whose column sums go through a workspace, `partials` rows deep,
// summed by a second kernel (config.of).
const char *kProgram = R"json({
  "format": "coat-manifest", "version": 1,
  "kernels": [
    {"name": "p_k0_quantize", "op": "quantize",
     "config": {"group_size": 16},
     "launch": {"block": [256], "elements_per_block": 4096},
     "args": [
       {"name": "input", "kind": "memref", "dtype": "bf16", "extent": "n", "bind": "in0"},
       {"name": "codes", "kind": "memref", "dtype": "e4m3", "extent": "n", "bind": "out0.codes"},
       {"name": "scale", "kind": "memref", "dtype": "bf16", "extent": "groups", "bind": "out0.scale"},
       {"name": "rows", "kind": "scalar", "dtype": "i64", "bind": "rows(in0)"},
       {"name": "cols", "kind": "scalar", "dtype": "i64", "bind": "cols(in0)"}]},
    {"name": "p_k1_norm_grad", "op": "rmsnorm_grad",
     "config": {"group_size": 16, "rows_per_block": 2, "max_cols": 1024},
     "launch": {"block": [64], "grid_tiles": [["partials", 2]]},
     "args": [
       {"name": "x_codes", "kind": "memref", "dtype": "e4m3", "extent": "n", "bind": "in0.codes"},
       {"name": "x_scale", "kind": "memref", "dtype": "bf16", "extent": "groups", "bind": "in0.scale"},
       {"name": "dy", "kind": "memref", "dtype": "bf16", "extent": "n", "bind": "in1"},
       {"name": "dx", "kind": "memref", "dtype": "bf16", "extent": "n", "bind": "out0"},
       {"name": "partial", "kind": "memref", "dtype": "f32", "extent": "partials*cols", "bind": "scratch"},
       {"name": "rows", "kind": "scalar", "dtype": "i64", "bind": "rows(in0)"},
       {"name": "cols", "kind": "scalar", "dtype": "i64", "bind": "cols(in0)"},
       {"name": "partials", "kind": "scalar", "dtype": "i64", "bind": "free"}]},
    {"name": "p_k1_norm_grad_reduce", "op": "norm_grad_reduce",
     "config": {"of": "p_k1_norm_grad"},
     "launch": {"block": [32], "grid_tiles": [["cols", 32]]},
     "args": [
       {"name": "partial", "kind": "memref", "dtype": "f32", "extent": "partials*cols", "bind": "scratch"},
       {"name": "dweight", "kind": "memref", "dtype": "bf16", "extent": "cols", "bind": "out1"},
       {"name": "cols", "kind": "scalar", "dtype": "i64", "bind": "cols(in0)"},
       {"name": "partials", "kind": "scalar", "dtype": "i64", "bind": "free"}]}],
  "programs": [{
    "name": "p",
    "values": [
      {"kind": "tensor", "shape": [-1, 64], "dtype": "bf16"},
      {"kind": "tensor", "shape": [-1, 64], "dtype": "bf16"},
      {"kind": "qtensor", "shape": [-1, 64], "dtype": "e4m3", "scaling": "per_group<16>",
       "scale_dtype": "bf16", "scale_shape": [-1, 4]},
      {"kind": "tensor", "shape": [-1, 64], "dtype": "bf16"},
      {"kind": "tensor", "shape": [64], "dtype": "bf16"}],
    "inputs": [{"value": 0, "role": "activation"}, {"value": 1, "role": "gradient"}],
    "steps": [
      {"spec": "p_k0_quantize", "phase": "forward", "operands": [0], "results": [2]},
      {"spec": "p_k1_norm_grad", "phase": "backward", "operands": [2, 1], "results": [3, 4]}],
    "outputs": [{"value": 3, "phase": "backward", "grad_of": 0},
                {"value": 4, "phase": "backward"}],
    "saved": [2]}]})json";

Manifest parseOk(const std::string &text) {
  Manifest m;
  std::string err;
  EXPECT_TRUE(parseManifest(text, "/d", m, err)) << err;
  return m;
}

/// The reader's message for kProgram with `from` replaced by `to`.
std::string parseErr(const std::string &from, const std::string &to) {
  std::string text = kProgram;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  Manifest m;
  std::string err;
  EXPECT_FALSE(parseManifest(text, "/d", m, err)) << from << " -> " << to;
  return err;
}

#define EXPECT_HAS(text, part)                                                 \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                   \
      << "'" << (part) << "' not in: " << (text)

using Kind = BufferSource::Kind;
using Part = ValueRef::Part;

void expectSource(const BufferSource &s, Kind kind, int64_t index,
                  Part part = Part::Whole) {
  EXPECT_EQ(int(s.kind), int(kind));
  EXPECT_EQ(s.index, index);
  EXPECT_EQ(int(s.part), int(part));
}

TEST(RuntimeProgram, ReadsCallsAndTheirKernels) {
  Manifest m = parseOk(kProgram);
  ASSERT_EQ(m.programs.size(), 1u);
  const Program &p = m.programs[0];
  ASSERT_EQ(p.steps.size(), 2u);
  // The spec's kernel, then the one that finishes it (config.of).
  ASSERT_EQ(p.steps[1].kernels.size(), 2u);
  EXPECT_EQ(m.kernels[p.steps[1].kernels[1].kernel].name, "p_k1_norm_grad_reduce");
  EXPECT_EQ(int(p.steps[0].phase), int(Phase::Forward));
  EXPECT_EQ(int(p.steps[1].phase), int(Phase::Backward));
  EXPECT_EQ(p.values[2].scaling, coat::Scaling::perGroup(16));
  const Binding &scale = p.steps[0].kernels[0].bindings[2];
  ASSERT_EQ(scale.names.size(), 1u);
  EXPECT_TRUE(scale.names[0].result);
  EXPECT_EQ(int(scale.names[0].part), int(Part::Scale));
  EXPECT_EQ(int(p.steps[1].kernels[0].bindings[7].kind), int(Binding::Kind::Free));
}

TEST(RuntimeProgram, PlansAllocationsFromLayoutsScaleShapes) {
  Manifest m = parseOk(kProgram);
  StepPlan plan;
  std::string err;
  ASSERT_TRUE(planStep(m, m.programs[0], 0, 5, nullptr, plan, err)) << err;
  ASSERT_EQ(plan.allocs.size(), 2u);
  EXPECT_EQ(plan.allocs[0].shape, (std::vector<int64_t>{5, 64}));
  EXPECT_EQ(plan.allocs[0].dtype, "e4m3");
  EXPECT_EQ(plan.allocs[1].shape, (std::vector<int64_t>{5, 4})); // per_group<16>
  EXPECT_EQ(plan.allocs[1].dtype, "bf16");
  ASSERT_EQ(plan.launches.size(), 1u);
  EXPECT_EQ(plan.launches[0].n, 320);
  EXPECT_EQ(plan.launches[0].scalars, (std::vector<int64_t>{5, 64}));
  expectSource(plan.launches[0].buffers[0], Kind::Value, 0);
  ASSERT_EQ(plan.results.size(), 1u);
  EXPECT_EQ(plan.results[0].first, 2);
  ASSERT_EQ(plan.results[0].second.size(), 2u); // codes, scale
  expectSource(plan.results[0].second[1], Kind::Alloc, 1);
}

TEST(RuntimeProgram, PlansWorkspacesAndFreeScalarsOncePerCall) {
  Manifest m = parseOk(kProgram);
  StepPlan plan;
  std::string err;
  // CPU twins: 256 CTAs of rows_per_block = 2 rows, at most `rows`.
  ASSERT_TRUE(planStep(m, m.programs[0], 1, 5, nullptr, plan, err)) << err;
  ASSERT_EQ(plan.launches.size(), 2u);
  const PlannedLaunch &row = plan.launches[0], &reduce = plan.launches[1];
  EXPECT_EQ(row.scalars, (std::vector<int64_t>{5, 64, 5}));
  EXPECT_EQ(row.n, 5 * 64);
  expectSource(row.buffers[0], Kind::Value, 2, Part::Codes);
  expectSource(row.buffers[1], Kind::Value, 2, Part::Scale);
  expectSource(row.buffers[2], Kind::Value, 1);
  expectSource(row.buffers[3], Kind::Alloc, 0);
  expectSource(row.buffers[4], Kind::Scratch, 0);
  ASSERT_EQ(plan.scratch.size(), 1u); // shared by both kernels
  EXPECT_EQ(plan.scratch[0].shape, (std::vector<int64_t>{5 * 64}));
  EXPECT_EQ(plan.scratch[0].dtype, "f32");
  // No scalar n and no extent-n buffer: the launch size is cols.
  EXPECT_EQ(reduce.n, 64);
  EXPECT_EQ(reduce.scalars, (std::vector<int64_t>{64, 5}));
  expectSource(reduce.buffers[0], Kind::Scratch, 0);
  expectSource(reduce.buffers[1], Kind::Alloc, 1);
  EXPECT_EQ(plan.allocs[1].shape, (std::vector<int64_t>{64}));

  // On a GPU: one wave of the row kernel's teams, asked per kernel.
  std::vector<std::string> asked;
  ResidentBlocks resident = [&](const KernelSpec &k) {
    asked.push_back(k.name);
    return int64_t(3);
  };
  ASSERT_TRUE(planStep(m, m.programs[0], 1, 4096, resident, plan, err)) << err;
  EXPECT_EQ(asked, (std::vector<std::string>{"p_k1_norm_grad"}));
  EXPECT_EQ(plan.launches[0].scalars[2], 6);
  EXPECT_EQ(plan.launches[1].scalars[1], 6);
  EXPECT_EQ(plan.scratch[0].shape[0], 6 * 64);
  EXPECT_FALSE(planStep(m, m.programs[0], 1, 8,
                        [](const KernelSpec &) { return int64_t(0); }, plan, err));
  EXPECT_HAS(err, "no resident-block count for kernel 'p_k1_norm_grad'");
}

std::string open(const std::string &text, coat_manifest **m, int &status) {
  char err[512];
  status = coat_manifest_open(text.data(), text.size(), m, err, sizeof err);
  return err;
}

/// kProgram with `from` replaced by `to`, parsed.
Manifest parseWith(const std::string &from, const std::string &to) {
  std::string text = kProgram;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  return parseOk(text);
}

TEST(RuntimeProgram, FiniteFlagsAreWordsOfTheProgramsOutputs) {
  // The reduction flags the weight gradient (out1 of the call: value 4,
  // the program's output 1).
  const std::string dweight =
      R"j({"name": "dweight", "kind": "memref", "dtype": "bf16", "extent": "cols", "bind": "out1"},)j";
  const std::string flag =
      R"j({"name": "finite_dweight", "kind": "memref", "dtype": "i32", "extent": 1, "bind": "finite(out1)"},)j";
  Manifest m = parseWith(dweight, dweight + flag);
  StepPlan plan;
  std::string err;
  ASSERT_TRUE(planStep(m, m.programs[0], 1, 5, nullptr, plan, err)) << err;
  ASSERT_EQ(plan.launches[1].buffers.size(), 3u);
  expectSource(plan.launches[1].buffers[2], Kind::Flag, 1);
  EXPECT_TRUE(plan.scratch.size() == 1u && plan.allocs.size() == 2u);
  // The reader's document says which outputs are flagged (the executor's
  // only source for it).
  std::string text = kProgram;
  text.replace(text.find(dweight), dweight.size(), dweight + flag);
  coat_manifest *cm = nullptr;
  int status;
  std::string openErr = open(text, &cm, status);
  ASSERT_EQ(status, COAT_MANIFEST_OK) << openErr;
  std::string doc = coat_manifest_document(cm);
  coat_manifest_close(cm);
  EXPECT_HAS(doc, "{\"value\":3,\"phase\":\"backward\",\"flagged\":false,\"grad_of\":0,"
                  "\"recompute_of\":null}");
  EXPECT_HAS(doc, "{\"value\":4,\"phase\":\"backward\",\"flagged\":true,\"grad_of\":null,"
                  "\"recompute_of\":null}");

  // Only a result of the call, whole, as an i32 word.
  auto refused = [&](const std::string &bad) {
    return parseErr(dweight, dweight + bad);
  };
  EXPECT_HAS(refused(R"j({"name": "f", "kind": "memref", "dtype": "i32", "extent": 1, "bind": "finite(in0)"},)j"),
             "binds 'finite(in0)', not finite(out<i>)");
  EXPECT_HAS(refused(R"j({"name": "f", "kind": "memref", "dtype": "f32", "extent": 1, "bind": "finite(out1)"},)j"),
             "is a finiteness flag of dtype f32, not i32");
  EXPECT_HAS(refused(R"j({"name": "f", "kind": "memref", "dtype": "i32", "extent": 1, "bind": "finite(out7)"},)j"),
             "binds out7, the call has 2 result(s)");

  // A value the program does not return has no word.
  const std::string scale =
      R"j({"name": "scale", "kind": "memref", "dtype": "bf16", "extent": "groups", "bind": "out0.scale"},)j";
  EXPECT_HAS(parseErr(scale, scale + R"j({"name": "f", "kind": "memref", "dtype": "i32", "extent": 1, "bind": "finite(out0)"},)j"),
             "flags value 2, which the program does not return");
}

TEST(RuntimeProgram, RefusesCallsItCannotFollow) {
  const std::string step1 = "programs[0] ('p').steps[1] ('p_k1_norm_grad'): ";
  EXPECT_HAS(parseErr("\"spec\": \"p_k1_norm_grad\"", "\"spec\": \"p_k9\""),
             "manifest: programs[0] ('p').steps[1] ('p_k9'): no kernel 'p_k9' in "
             "the manifest");
  EXPECT_HAS(parseErr("\"bind\": \"in0.codes\"", "\"bind\": \"in0.code\""),
             step1 + "kernel 'p_k1_norm_grad' argument 'x_codes' binds 'in0.code', "
                     "not a value reference");
  EXPECT_HAS(parseErr("\"bind\": \"in1\"", "\"bind\": \"in7\""),
             "argument 'dy' binds in7, the call has 2 operand(s)");
  EXPECT_HAS(parseErr("\"bind\": \"in1\"", "\"bind\": \"in1.scale\""),
             "binds in1.scale, but value 1 is a tensor (it has no parts)");
  EXPECT_HAS(parseErr("\"bind\": \"in0.scale\"", "\"bind\": \"in0\""),
             "binds in0, but value 2 is a qtensor (bind its .codes or .scale)");
  EXPECT_HAS(parseErr("\"dtype\": \"bf16\", \"extent\": \"n\", \"bind\": \"in1\"",
                      "\"dtype\": \"f32\", \"extent\": \"n\", \"bind\": \"in1\""),
             "argument 'dy' (f32) binds in1, a bf16 buffer");
  EXPECT_HAS(parseErr("\"bind\": \"rows(in0)\"", "\"bind\": \"rows(in0\""),
             "programs[0] ('p').steps[0] ('p_k0_quantize'): kernel 'p_k0_quantize' "
             "argument 'rows' binds 'rows(in0', not an extent expression");
  EXPECT_HAS(parseErr("\"bind\": \"cols(in0)\"", "\"bind\": \"ceildiv(cols(in0),0)\""),
             "not an extent expression");
  EXPECT_HAS(parseErr("\"bind\": \"free\"", "\"bind\": [\"free\", \"in0\"]"),
             "argument 'partials' is a scalar bound to 2 names");
  EXPECT_HAS(parseErr(", \"bind\": \"out1\"", ""),
             "argument 'dweight' has no binding (compiled by an older coat-opt?)");
}

TEST(RuntimeProgram, RefusesValuesAndDataflowItCannotFollow) {
  EXPECT_HAS(parseErr("\"scale_shape\": [-1, 4]", "\"scale_shape\": [-1, 8]"),
             "programs[0] ('p').values[2].scale_shape: [-1, 8] is not [-1, 4], the "
             "scale shape of per_group<16> for [-1, 64]");
  EXPECT_HAS(parseErr("\"scaling\": \"per_group<16>\"", "\"scaling\": \"per_grp<16>\""),
             "values[2].scaling: unknown scaling 'per_grp<16>'");
  EXPECT_HAS(parseErr("\"scaling\": \"per_group<16>\"", "\"scaling\": \"per_group<48>\""),
             "per_group<48> does not fit the shape [-1, 64]");
  EXPECT_HAS(parseErr("\"saved\": [2]", "\"saved\": [3]"),
             "programs[0] ('p').steps[1] ('p_k1_norm_grad'): the backward reads value "
             "2, which the forward does not save");
  EXPECT_HAS(parseErr("\"saved\": [2]", "\"saved\": [2, 3]"),
             "saved[1]: value 3 is computed by the backward, not saved by the forward");
  EXPECT_HAS(parseErr("\"saved\": [2]", "\"saved\": [9]"),
             "saved[0]: value 9 does not exist (5 values)");
  EXPECT_HAS(parseErr("\"operands\": [0]", "\"operands\": [3]"),
             "steps[0] ('p_k0_quantize'): reads value 3 before any input or call "
             "defines it");
  EXPECT_HAS(parseErr("\"phase\": \"backward\", \"operands\"",
                      "\"phase\": \"forward\", \"operands\""),
             "a forward call reads value 1, which depends on a gradient");
  EXPECT_HAS(parseErr("\"results\": [3, 4]", "\"results\": [3, 3]"),
             "value 3 is defined twice");
  EXPECT_HAS(parseErr("\"role\": \"gradient\"", "\"role\": \"grad\""),
             "inputs[1].role: expected \"activation\", \"weight\" or \"gradient\"");
  EXPECT_HAS(parseErr("\"grad_of\": 0}", "\"grad_of\": 4}"),
             "outputs[0].grad_of: no input 4");
  EXPECT_HAS(parseErr("\"version\": 1", "\"version\": 0"), "expected an integer >= 1");
  EXPECT_HAS(parseErr("\"version\": 1", "\"version\": 2"),
             "unsupported manifest version 2 (this runtime reads 1)");
}

/// kProgram with a recompute phase: output 0 is the forward's 1x16 copy
/// of x (value 2), which the caller may drop; the recompute call makes it
/// again from x (saved for it) as value 5, output 3.
std::string withRecompute() {
  std::string text = kProgram;
  auto replace = [&](const std::string &from, const std::string &to) {
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace(R"j({"kind": "tensor", "shape": [64], "dtype": "bf16"}],)j",
          R"j({"kind": "tensor", "shape": [64], "dtype": "bf16"},
      {"kind": "qtensor", "shape": [-1, 64], "dtype": "e4m3", "scaling": "per_group<16>",
       "scale_dtype": "bf16", "scale_shape": [-1, 4]}],)j");
  // Between the forward and the backward, as the compiler places it.
  replace(R"j("operands": [0], "results": [2]},)j",
          R"j("operands": [0], "results": [2]},
      {"spec": "p_k0_quantize", "phase": "recompute", "operands": [0], "results": [5]},)j");
  replace(R"j("outputs": [{"value": 3,)j",
          R"j("outputs": [{"value": 2, "phase": "forward"}, {"value": 3,)j");
  replace(R"j({"value": 4, "phase": "backward"}],)j",
          R"j({"value": 4, "phase": "backward"},
                {"value": 5, "phase": "recompute", "recompute_of": 0}],)j");
  replace(R"j("saved": [2])j", R"j("saved": [2, 0])j");
  return text;
}

std::string recomputeErr(const std::string &from, const std::string &to) {
  std::string text = withRecompute();
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  Manifest m;
  std::string err;
  EXPECT_FALSE(parseManifest(text, "/d", m, err)) << from << " -> " << to;
  return err;
}

TEST(RuntimeProgram, ReadsARecomputePhase) {
  Manifest m = parseOk(withRecompute());
  ASSERT_EQ(m.programs.size(), 1u);
  const Program &p = m.programs[0];
  ASSERT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(int(p.steps[1].phase), int(Phase::Recompute));
  ASSERT_EQ(p.outputs.size(), 4u);
  EXPECT_EQ(int(p.outputs[3].phase), int(Phase::Recompute));
  EXPECT_EQ(p.outputs[3].recomputeOf, 0);
  EXPECT_EQ(p.outputs[0].recomputeOf, -1);
  StepPlan plan;
  std::string err;
  ASSERT_TRUE(planStep(m, p, 1, 5, nullptr, plan, err)) << err;
  ASSERT_EQ(plan.results.size(), 1u);
  EXPECT_EQ(plan.results[0].first, 5);

  coat_manifest *cm = nullptr;
  int status;
  std::string openErr = open(withRecompute(), &cm, status);
  ASSERT_EQ(status, COAT_MANIFEST_OK) << openErr;
  std::string doc = coat_manifest_document(cm);
  coat_manifest_close(cm);
  EXPECT_HAS(doc, "{\"spec\":\"p_k0_quantize\",\"phase\":\"recompute\",\"operands\":[0],"
                  "\"results\":[5]");
  EXPECT_HAS(doc, "{\"value\":5,\"phase\":\"recompute\",\"flagged\":false,\"grad_of\":null,"
                  "\"recompute_of\":0}");
}

TEST(RuntimeProgram, RefusesRecomputePhasesItCannotFollow) {
  const std::string step1 = "programs[0] ('p').steps[1] ('p_k0_quantize'): ";
  // It reads from the forward only what the forward saves.
  EXPECT_HAS(recomputeErr("\"saved\": [2, 0]", "\"saved\": [2]"),
             step1 + "the recompute phase reads value 0, which the forward does not save");
  // It runs when the caller asks, if at all: no other phase reads it, and
  // it reads nothing of the backward.
  EXPECT_HAS(recomputeErr("\"operands\": [2, 1]", "\"operands\": [5, 1]"),
             "steps[2] ('p_k1_norm_grad'): a backward call reads value 5, which the "
             "recompute phase computes (it runs only when the caller asks)");
  EXPECT_HAS(recomputeErr("\"phase\": \"recompute\", \"operands\": [0]",
                          "\"phase\": \"recompute\", \"operands\": [1]"),
             step1 + "a recompute call reads value 1, which depends on a gradient");
  EXPECT_HAS(recomputeErr("\"phase\": \"recompute\", \"operands\"",
                          "\"phase\": \"later\", \"operands\""),
             "steps[1].phase: expected \"forward\", \"recompute\" or \"backward\", "
             "got \"later\"");
  // Its outputs name the forward output they copy, and only they do.
  EXPECT_HAS(recomputeErr(", \"recompute_of\": 0}", "}"),
             "outputs[3]: an output of the recompute phase needs 'recompute_of'");
  EXPECT_HAS(recomputeErr("\"recompute_of\": 0}", "\"recompute_of\": 1}"),
             "outputs[3].recompute_of: output 1 is not a forward output");
  EXPECT_HAS(recomputeErr("{\"value\": 4, \"phase\": \"backward\"}",
                          "{\"value\": 4, \"phase\": \"backward\", \"recompute_of\": 0}"),
             "outputs[2].recompute_of: only an output of the recompute phase copies a "
             "forward output");
  EXPECT_HAS(recomputeErr("{\"value\": 5, \"phase\": \"recompute\"",
                          "{\"value\": 5, \"phase\": \"backward\""),
             "outputs[3]: value 5 is not computed in the phase the output names");
}

TEST(RuntimeProgram, RefusesLaunchesItsPlansWouldMake) {
  // Only sizes tell these: the reader makes every call's plan once.
  EXPECT_HAS(parseErr("\"max_cols\": 1024", "\"max_cols\": 32"),
             "steps[1] ('p_k1_norm_grad'): kernel 'p_k1_norm_grad': cols = 64 "
             "exceeds the kernel's max_cols = 32 (planned for 256 tokens)");
  EXPECT_HAS(parseErr("\"shape\": [64]", "\"shape\": [32]"),
             "kernel 'p_k1_norm_grad_reduce' argument 'dweight': its buffer has 32 "
             "elements, the kernel takes 64");
  EXPECT_HAS(parseErr("\"bind\": \"out0.scale\"", "\"bind\": \"scratch\""),
             "no kernel of the call writes the scale of result 2 (out0)");
}

namespace {
// A rotation in place (coat.rope with a coat.writable input): its kernel
// binds the result to its first operand's buffer, so that operand, the
// projection's output, is consumed by the call.
const char *kInPlace = R"json({
  "format": "coat-manifest", "version": 1,
  "kernels": [
    {"name": "q_k0_project", "op": "linear", "config": {},
     "launch": {"block": [256], "elements_per_block": 4096},
     "args": [
       {"name": "x", "kind": "memref", "dtype": "bf16", "extent": "n", "bind": ["in0"]},
       {"name": "y", "kind": "memref", "dtype": "bf16", "extent": "n", "bind": ["out0"]}]},
    {"name": "q_k1_rope", "op": "rope",
     "config": {"cols": 8, "head_dim": 4, "rotated_heads": 1, "in_place": true},
     "launch": {"block": [256], "grid_tiles": [["rows", 64]]},
     "args": [
       {"name": "x", "kind": "memref", "dtype": "bf16", "extent": "n", "bind": ["in0", "out0"]},
       {"name": "cos", "kind": "memref", "dtype": "f32", "extent": "rows*4", "bind": ["in1"]},
       {"name": "rows", "kind": "scalar", "dtype": "i64", "bind": "rows(in0)"},
       {"name": "cols", "kind": "scalar", "dtype": "i64", "bind": "cols(in0)"}]}],
  "programs": [{
    "name": "q",
    "values": [
      {"kind": "tensor", "shape": [-1, 8], "dtype": "bf16"},
      {"kind": "tensor", "shape": [-1, 4], "dtype": "f32"},
      {"kind": "tensor", "shape": [-1, 8], "dtype": "bf16"},
      {"kind": "tensor", "shape": [-1, 8], "dtype": "bf16"},
      {"kind": "tensor", "shape": [-1, 8], "dtype": "bf16"}],
    "inputs": [{"value": 0, "role": "activation"}, {"value": 1, "role": "activation"}],
    "steps": [
      {"spec": "q_k0_project", "phase": "forward", "operands": [0], "results": [2]},
      {"spec": "q_k1_rope", "phase": "forward", "operands": [2, 1], "results": [3]},
      {"spec": "q_k0_project", "phase": "forward", "operands": [3], "results": [4]}],
    "outputs": [{"value": 4, "phase": "forward"}],
    "saved": []}]})json";

std::string inPlaceErr(const std::string &from, const std::string &to) {
  std::string text = kInPlace;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  Manifest m;
  std::string err;
  EXPECT_FALSE(parseManifest(text, "/d", m, err));
  return err;
}
} // namespace

TEST(RuntimeProgram, InPlaceResultsConsumeTheirOperand) {
  Manifest m = parseOk(kInPlace);
  StepPlan plan;
  std::string err;
  ASSERT_TRUE(planStep(m, m.programs[0], 1, 5, nullptr, plan, err)) << err;
  EXPECT_TRUE(plan.allocs.empty());
  ASSERT_EQ(plan.results.size(), 1u);
  EXPECT_EQ(plan.results[0].first, 3);
  expectSource(plan.results[0].second[0], Kind::Value, 2); // the operand's buffer
  // The operand must be the program's own and read by the call alone.
  const std::string at = "programs[0] ('q').steps[1] ('q_k1_rope'): kernel 'q_k1_rope' "
                         "writes its result over value ";
  EXPECT_HAS(inPlaceErr("\"operands\": [2, 1]", "\"operands\": [0, 1]"),
             at + "0, which is a program input (the caller's)");
  EXPECT_HAS(inPlaceErr("\"outputs\": [{\"value\": 4, \"phase\": \"forward\"}]",
                        "\"outputs\": [{\"value\": 4, \"phase\": \"forward\"}, "
                        "{\"value\": 2, \"phase\": \"forward\"}]"),
             at + "2, which the program outputs or saves");
  EXPECT_HAS(inPlaceErr("\"operands\": [3], \"results\": [4]",
                        "\"operands\": [2], \"results\": [4]"),
             at + "2, which is read elsewhere too");
}

TEST(RuntimeProgram, CApiPlansAndChecksLaunches) {
  coat_manifest *m = nullptr;
  int status;
  std::string err = open(kProgram, &m, status);
  ASSERT_EQ(status, COAT_MANIFEST_OK) << err;
  std::string doc = coat_manifest_document(m);
  EXPECT_HAS(doc, "\"kernels\":[\"p_k1_norm_grad\",\"p_k1_norm_grad_reduce\"]");
  EXPECT_HAS(doc, "\"scale_shape\":[-1,4]");
  EXPECT_HAS(doc, "{\"value\":1,\"role\":\"gradient\",\"grad_of\":null}");

  char buf[512];
  char *plan = nullptr;
  auto two = [](void *, const char *) { return int64_t(2); };
  ASSERT_EQ(coat_manifest_plan(m, "p", 1, 100, two, nullptr, &plan, buf, sizeof buf),
            COAT_MANIFEST_OK)
      << buf;
  std::string p = plan;
  coat_manifest_free(plan);
  EXPECT_HAS(p, "\"scratch\":[{\"extent\":256,\"dtype\":\"f32\"}]");
  EXPECT_HAS(p, "{\"kernel\":\"p_k1_norm_grad\",\"n\":6400,\"scalars\":[100,64,4],"
                "\"buffers\":[[\"value\",2,\"codes\"],[\"value\",2,\"scale\"],"
                "[\"value\",1,\"\"],[\"alloc\",0,\"\"],[\"scratch\",0,\"\"]]}");
  EXPECT_HAS(p, "\"results\":[{\"value\":3,\"buffers\":[[\"alloc\",0,\"\"]]}");
  EXPECT_EQ(coat_manifest_plan(m, "q", 0, 1, nullptr, nullptr, &plan, buf, sizeof buf),
            COAT_MANIFEST_ERR_INVALID_VALUE);
  EXPECT_STREQ(buf, "no program named 'q'");

  // A CPU twin's launch: n from the first extent-n buffer.
  int64_t sizes[3] = {320, 320, 20};
  double scalars[2] = {5, 64};
  int64_t n = COAT_MANIFEST_N_FROM_BUFFERS;
  ASSERT_EQ(coat_manifest_check_launch(m, "p_k0_quantize", &n, sizes, 3,
                                       scalars, 2, buf, sizeof buf),
            COAT_MANIFEST_OK)
      << buf;
  EXPECT_EQ(n, 320);
  sizes[2] = 21;
  EXPECT_EQ(coat_manifest_check_launch(m, "p_k0_quantize", &n, sizes, 3,
                                       scalars, 2, buf, sizeof buf),
            COAT_MANIFEST_ERR_ARGUMENTS);
  EXPECT_STREQ(buf, "kernel 'p_k0_quantize': argument 'scale': has 21 elements, "
                    "expected 20 (extent ceil(n / 16), n = 320)");

  const char *names[2] = {"partials", "cols"};
  int64_t values[2] = {3, 64}, extent = 0, grid[3] = {0, 0, 0};
  ASSERT_EQ(coat_manifest_extent(m, "p_k1_norm_grad", "partial", 0, names, values, 2,
                                 &extent, buf, sizeof buf),
            COAT_MANIFEST_OK)
      << buf;
  EXPECT_EQ(extent, 192);
  EXPECT_EQ(coat_manifest_extent(m, "p_k1_norm_grad", "partial", 0, names, values, 1,
                                 &extent, buf, sizeof buf),
            COAT_MANIFEST_ERR_ARGUMENTS);
  EXPECT_HAS(buf, "the extent of 'partial' needs the scalar 'cols'");
  ASSERT_EQ(coat_manifest_grid(m, "p_k1_norm_grad_reduce", 64, names, values, 2, grid,
                               buf, sizeof buf),
            COAT_MANIFEST_OK);
  EXPECT_EQ(grid[0], 2);
  int64_t partials = 0;
  ASSERT_EQ(coat_manifest_default_partials(m, "p_k1_norm_grad", 1000, 0, &partials,
                                           buf, sizeof buf),
            COAT_MANIFEST_OK);
  EXPECT_EQ(partials, 512); // 256 CPU teams of 2 rows
  coat_manifest_close(m);

  // A bad programs section has its own status.
  std::string bad = kProgram;
  bad.replace(bad.find("\"saved\": [2]"), 12, "\"saved\": []");
  err = open(bad, &m, status);
  EXPECT_EQ(status, COAT_MANIFEST_ERR_PROGRAM) << err;
  EXPECT_EQ(m, nullptr);
}

} // namespace
