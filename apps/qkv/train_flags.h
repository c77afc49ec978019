#pragma once
// `qkv train`'s flags of the run configuration: one per row of runtime::config_fields() that has a
// flag (run_config_fields.h), declared, validated and turned into overrides in one loop.
#include <deque>
#include <string>

#include <CLI/CLI.hpp>

#include "qkv/runtime/run_config_fields.h"

namespace qkv::cli {

/// What the table's flags hold after parsing (one slot per flag; CLI11 writes into it).
struct ConfigFlags {
    struct Slot {
        const runtime::ConfigField* field = nullptr;
        CLI::Option* option = nullptr;
        int64_t i = 0;
        uint64_t u = 0;
        double r = 0;
        bool b = false;
        std::string s;
    };
    std::deque<Slot> slots;  // a deque: CLI11 keeps pointers into the slots
};

/// Declares on `c`, in table order, a flag for every row that has one and that `c` does not declare
/// already (qkv train declares --preset and --model itself: they also take the LM's names): its
/// type, range (the row's flag_range, else its range), help text and --help group.
void add_config_flags(CLI::App* c, ConfigFlags& f);

/// The flags given, as overrides: values in their rows' types (durations parsed, on|off a bool,
/// switches true), the text given kept for messages. Throws qkv::Error for a bad duration.
runtime::RunOverrides config_overrides(const ConfigFlags& f);

/// "--epochs, --max-steps, --time-budget, ...": the flags --resume applies (OnResume::apply).
std::string resume_applied_flags();

}  // namespace qkv::cli
