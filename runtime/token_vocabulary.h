// A tokenizer's vocabulary for constrained decoding (runtime/token_automaton.h): each token's bytes,
// except special and added tokens, which a constraint never allows (EOS excepted, where it accepts).
#pragma once

#include <memory>

#include "runtime/token_automaton.h"
#include "runtime/tokenizer.h"

namespace mk::constraint {

std::shared_ptr<const TokenVocabulary> token_vocabulary(const Tokenizer& tokenizer);

}  // namespace mk::constraint
