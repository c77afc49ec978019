#pragma once
// Finding, reading and parsing the English–French sentence pairs (Tatoeba via manythings.org,
// the file D2L downloads as fra-eng.zip; d2l_spec.md §2, quality_anchor.md §2.1 step 1).
// Text only: tokenising is data/tokenizer.h, vocabularies and arrays are data/nmt_data.h.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::data {

/// Public origin of the data, named in "not found" errors.
constexpr const char* kFraEngUrl = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip";
/// Licence and attribution the data requires.
constexpr const char* kFraEngAttribution =
    "Tatoeba sentence pairs from www.manythings.org/anki (tatoeba.org), licensed CC BY 2.0";
/// Where locate_fra_eng looks when neither a path nor QKV_DATA is given (relative to the
/// working directory: the project's checkout sits next to shared/).
constexpr const char* kFraEngDefaultPath = "../shared/data/fra-eng.zip";

/// Resolves the data location: `explicit_path` if non-empty, else the environment variable
/// QKV_DATA if set, else kFraEngDefaultPath. A folder is searched for fra-eng.zip,
/// fra-eng/fra.txt and fra.txt (in that order). Returns a path to a .zip or a text file.
/// Throws qkv::Error saying where it looked (and why: flag, QKV_DATA or default), the download
/// address kFraEngUrl and the attribution when nothing is found. An explicit path or QKV_DATA
/// that does not exist is an error; there is no fallback to the default.
std::string locate_fra_eng(const std::string& explicit_path = "");

/// The text of the pairs file: from a .zip, the entry "fra-eng/fra.txt" (libzip; "__MACOSX/"
/// entries are never read); any other path is read as plain text. Throws qkv::Error naming the
/// archive and the entries it holds when fra-eng/fra.txt is missing, or the file otherwise.
std::string read_fra_eng_text(const std::string& path);

struct ParseOptions {
    /// A malformed line throws qkv::Error (with its line number) instead of being skipped.
    bool strict = false;
    /// false (the anchor's rule): a line is a pair iff it has exactly 2 TAB-separated fields.
    /// true: lines with 3+ fields (newer Tatoeba exports add an attribution column) use fields 1–2.
    bool allow_extra_fields = false;
    /// A side longer than this many code points is malformed (fra.txt's longest line has 647 bytes).
    int64_t max_chars = 1000;
    /// Read at most this many lines (-1: all). D2L reads max_examples + 1 lines (spec §2).
    int64_t max_lines = -1;
    /// How many malformed lines to keep for the report.
    int report_first = 5;
    /// The sides' names in reasons ("empty English side"); other corpora say "source"/"target".
    std::string src_side = "English", tgt_side = "French";
};

struct MalformedLine {
    int64_t line = 0;  // 1-based
    std::string reason;
};

/// Raw (not yet preprocessed) sentence pairs in file order.
struct ParallelCorpus {
    std::string origin;                 // file (and zip entry) it came from
    std::vector<std::string> src, tgt;  // English, French
    std::vector<int64_t> line;          // 0-based line index of each pair
    int64_t lines_read = 0;             // lines examined (a final empty line is not counted)
    int64_t malformed  = 0;             // lines skipped
    std::vector<MalformedLine> first_malformed;  // the first report_first of them
    int64_t size() const { return int64_t(src.size()); }
    /// "fra-eng.zip:fra-eng/fra.txt: 167130 pairs from 167130 lines" plus, when lines were
    /// skipped, "; 3 malformed lines skipped (line 7: no TAB; ...)".
    std::string summary() const;
};

/// Parses "English<TAB>French" lines split on '\n' (a trailing '\r' is removed; the empty
/// piece after a final '\n' is not a line). Malformed: no TAB; a field count other than 2
/// (unless allow_extra_fields); an empty or blank side (only spaces, U+00A0, U+202F); invalid
/// UTF-8; a NUL byte (reason "NUL byte (byte offset N)", N counted from the line's start); a side
/// longer than max_chars. Skipped and counted unless strict. Throws qkv::Error when
/// strict and a line is malformed (naming origin, line number and reason), or when no pair at
/// all is found.
ParallelCorpus parse_parallel_text(std::string_view text, const ParseOptions& opt = {},
                                   const std::string& origin = "<text>");

/// Why one side of a pair is malformed, or "" when it is not, checked in this order: invalid UTF-8
/// ("invalid UTF-8 (byte offset N)"), a NUL byte ("NUL byte (byte offset N)"), blank ("empty
/// <side> side"; spaces, U+00A0, U+202F), longer than opt.max_chars code points. `side` names it
/// in the reason ("source"). The rules parse_parallel_text applies to each side.
std::string side_problem(std::string_view text, const std::string& side, const ParseOptions& opt);

/// read_fra_eng_text + parse_parallel_text.
ParallelCorpus load_fra_eng(const std::string& path, const ParseOptions& opt = {});

}  // namespace qkv::data
