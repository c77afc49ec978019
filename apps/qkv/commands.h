#pragma once
// Subcommand registration for the qkv CLI: each cmd_<name>.cpp adds one subcommand to the app
// and stores its callback. main.cpp calls every add_* function below.
#include <CLI/CLI.hpp>

namespace qkv::cli {

/// Exit code convention: 0 ok, 1 runtime error (qkv::Error), 2 usage error, 128 + N stopped by
/// signal N (ExitStatus).
using Registrar = void (*)(CLI::App&);

/// Thrown by a command whose output is complete but whose exit status is not 0 (e.g. qkv train
/// stopped by Ctrl-C: 130); main.cpp returns `code`.
struct ExitStatus {
    int code;
};

/// Commands register themselves through a static Registration object in their .cpp file.
struct Registration {
    explicit Registration(Registrar r);
};

}  // namespace qkv::cli
