// The emulator against the fp32 reference on one model: greedy generation from a prompt, with the
// reference teacher-forced on the emulator's own tokens, so the two stay on one sequence.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "host/emulator/emulator.h"
#include "runtime/reference.h"
#include "tests/helpers/logits_compare.h"

namespace mk::test {

// `n` greedy tokens from `prompt`.
inline GenerateResult greedy(DecodeBackend& backend, std::vector<int32_t> prompt, int n) {
  GenerateRequest req;
  req.input = std::move(prompt);
  req.max_new_tokens = n;
  return backend.generate(req, {});
}

// A prompt of n ids below `vocab`, none of the first three (the tiny models' special ids): (37 i + 11)
// mod (vocab - 3) + 3.
inline std::vector<int32_t> prompt_of(int n, int vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + 11) % (vocab - 3) + 3));
  return p;
}

// `n` greedy tokens: every step's logits within 2% (relative L2) of the reference's, and the same token
// unless the reference's top two are within rounding (then a note says so). `opt` must record logits.
inline void expect_emulator_matches_reference(const Model& model, const std::vector<int32_t>& prompt, const EmulatorOptions& opt,
                                              int n) {
  Emulator emu(model, opt);
  GenerateRequest req;
  req.input = prompt;
  req.max_new_tokens = n;
  const GenerateResult result = emu.generate(req, {});
  ASSERT_EQ(int(result.tokens.size()), n) << stop_reason_name(result.stop);
  ASSERT_EQ(int(emu.recorded_logits().size()), n);

  ReferenceModel ref(model, opt.context);
  std::vector<float> ref_logits;
  for (int32_t t : prompt) ref_logits = ref.forward(t);
  for (int i = 0; i < n; ++i) {
    const auto cmp = compare_logits(ref_logits, emu.recorded_logits()[size_t(i)]);
    EXPECT_LT(cmp.relative_error, 2e-2) << "step " << i << ": " << cmp.summary();
    if (cmp.reference_margin > 1e-2 * cmp.reference_scale)
      EXPECT_EQ(result.tokens[size_t(i)], cmp.reference_argmax) << "step " << i << ": " << cmp.summary();
    else
      std::printf("note: step %d: reference top-2 logits within rounding (%s)\n", i, cmp.summary().c_str());
    ref_logits = ref.forward(result.tokens[size_t(i)]);
  }
}

}  // namespace mk::test
