// `qkv train`'s flags from the run-configuration table (train_flags.h).
#include "train_flags.h"

#include "options.h"

namespace qkv::cli {

namespace {

using runtime::ConfigField;
using runtime::FieldType;
using runtime::FlagKind;

/// The row's help text with "{presets}" replaced by the presets' values (true by construction).
std::string help_text(const ConfigField& f) {
    std::string h = f.help;
    if (const size_t at = h.find("{presets}"); at != std::string::npos)
        h.replace(at, 9, runtime::field_preset_defaults(f));
    return h;
}

CLI::Option* declare(CLI::App* c, ConfigFlags::Slot& s) {
    const ConfigField& f = *s.field;
    const runtime::FieldRange r = f.flag_range.value_or(f.range);
    const std::string help = help_text(f);
    if (f.flag_kind == FlagKind::switch_on || f.flag_kind == FlagKind::negatable)
        return c->add_flag(f.flag, s.b, help);
    if (f.flag_kind == FlagKind::on_off)
        return c->add_option(f.flag, s.s, help)->check(CLI::IsMember({"on", "off"}));
    switch (f.type) {
        case FieldType::integer:
            return c->add_option(f.flag, s.i, help)->transform(int_range(int64_t(r.lo), int64_t(r.hi)));
        case FieldType::unsigned_integer: return c->add_option(f.flag, s.u, help)->transform(seed_value());
        case FieldType::real: return c->add_option(f.flag, s.r, help)->check(real_range(r.lo, r.hi, r.lo_open));
        case FieldType::duration: return c->add_option(f.flag, s.s, help)->check(duration_or_off());
        case FieldType::choice: return c->add_option(f.flag, s.s, help)->check(CLI::IsMember(f.choice->names));
        default: {
            CLI::Option* o = c->add_option(f.flag, s.s, help);
            return f.file ? o->check(non_empty_path()) : o;
        }
    }
}

}  // namespace

void add_config_flags(CLI::App* c, ConfigFlags& f) {
    for (const auto& field : runtime::config_fields()) {
        if (!*field.flag || c->get_option_no_throw(runtime::field_flag_name(field)) != nullptr) continue;
        auto& s  = f.slots.emplace_back();
        s.field  = &field;
        s.option = declare(c, s);
        s.option->group(field.group);
    }
}

runtime::RunOverrides config_overrides(const ConfigFlags& f) {
    runtime::RunOverrides o;
    for (const auto& s : f.slots) {
        if (s.option->count() == 0) continue;
        const ConfigField& field = *s.field;
        if (field.flag_kind != FlagKind::value) {
            o.set(field.key, field.flag_kind == FlagKind::on_off ? s.s == "on" : s.b, s.s);
            continue;
        }
        switch (field.type) {
            case FieldType::integer: o.set(field.key, s.i); break;
            case FieldType::unsigned_integer: o.set(field.key, s.u); break;
            case FieldType::real: o.set(field.key, s.r); break;
            case FieldType::duration: o.set(field.key, runtime::parse_duration_or_off(s.s), s.s); break;
            default: o.set(field.key, s.s);
        }
    }
    return o;
}

std::string resume_applied_flags() {
    std::string flags;
    for (const auto& field : runtime::config_fields())
        if (*field.flag && field.on_resume == runtime::OnResume::apply)
            flags += (flags.empty() ? "" : ", ") + runtime::field_flag_name(field);
    return flags;
}

}  // namespace qkv::cli
