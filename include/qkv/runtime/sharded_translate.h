#pragma once
// Translating a test set with a Translator, shared over the ranks of an `mpirun -np N` job (qkv
// eval): each rank decodes a contiguous part and every rank gets every translation, in order. Each
// sentence's translation does not depend on its batch-mates, so the job gives one process's
// hypotheses.
#include <string>
#include <vector>

#include "qkv/dist/communicator.h"
#include "qkv/runtime/translator.h"

namespace qkv::runtime {

/// The best translation's words of each source (words, as tokenize_sentences gives them); an
/// empty list where the translator returned no hypothesis. Throws what Translator::translate throws.
std::vector<std::vector<std::string>> translate_words(Translator& tr, const std::vector<std::vector<std::string>>& src,
                                                      const TranslateOptions& to);

/// translate_words over the ranks of `comm`: rank r translates the r-th contiguous N-th of `src`
/// (its progress bar, on rank 0, stands for the job's) and every rank gets all the translations, in
/// order (allgather; words sent length-prefixed, so a byte-fallback newline in a word cannot break
/// a line). One process: translate_words. Throws qkv::Error when a rank's answer is garbled or the
/// counts disagree.
std::vector<std::vector<std::string>> translate_words_sharded(dist::Communicator& comm, Translator& tr,
                                                              const std::vector<std::vector<std::string>>& src,
                                                              TranslateOptions to);

/// A real-text model's translations of raw texts as `qkv translate` gives them: each text cut into
/// sentences (split_text), the parts translated over the ranks of `comm` (translate_words_sharded),
/// the translations put back in the text's layout (join_translations). skip[i]: text i is not
/// translated (""); skip has texts.size() entries. So qkv eval scores what qkv translate and qkv
/// serve answer.
std::vector<std::string> translate_texts_sharded(dist::Communicator& comm, Translator& tr,
                                                 const std::vector<std::string>& texts, const std::vector<bool>& skip,
                                                 const TranslateOptions& to);

/// The words of a text the model wrote (its words joined by single spaces); empty words dropped.
std::vector<std::string> split_words(const std::string& text);

}  // namespace qkv::runtime
