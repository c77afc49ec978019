// Optimizer-step kernels: ref<double> against PyTorch golden values (torch 1.13, float64), the
// fast fp32 kernels against PyTorch's float32 results and against ref<double> element-wise over
// several steps, on every SIMD path.
#include <vector>

#include "kernels/cpu/adam.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ref/adam.h"

namespace {

using namespace qkv::test;
namespace ref = qkv::kernels::ref;
namespace cpu = qkv::kernels::cpu;
using cpu::Isa;

// ---- PyTorch golden ----------------------------------------------------------------------------
// PYENV_VERSION=system python3 (torch 1.13): p0 = [0.5, -1.25, 2, 0, 0.75, -0.3, 1.1]; three
// steps with grads g_s = [0.1(s+1), -0.2, 0.05s, 1.5, -0.7, 0, 3], s = 0, 1, 2;
// Adam/AdamW(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1);
// SGD(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01);
// SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01). Printed with %.17g / %.9g.
const std::vector<double> kP0 = {0.5, -1.25, 2.0, 0.0, 0.75, -0.3, 1.1};
std::vector<double> grad_at(int s) { return {0.1 * (s + 1), -0.2, 0.05 * s, 1.5, -0.7, 0.0, 3.0}; }

// clang-format off
const std::vector<double> kAdam64 = {0.4703945842442005, -1.2200029910343033, 1.9699941600234585,
    -0.02999936066864814, 0.77999845751340113, -0.27003816243590334, 1.0700003077590667};
const std::vector<float> kAdam32 = {0.470394582f, -1.22000301f, 1.96999419f, -0.0299993642f,
    0.779998422f, -0.270038158f, 1.07000041f};
const std::vector<double> kAdamW64 = {0.46929931087213311, -1.2162837402485007, 1.9782863482311186,
    -0.029970009800199864, 0.77772225882185697, -0.29910089969999998, 1.0667332889998999};
const std::vector<float> kAdamW32 = {0.469299346f, -1.2162838f, 1.97828639f, -0.0299700107f,
    0.777722239f, -0.299100935f, 1.06673348f};
const std::vector<double> kSgd64 = {0.40909250649499995, -1.1370398702875, 1.9718225083799998,
    -0.79736562150000012, 1.1181171285925, -0.29840526875699996, -0.5005785908910001};
const std::vector<float> kSgd32 = {0.409092486f, -1.13703978f, 1.9718225f, -0.797365606f,
    1.11811709f, -0.29840529f, -0.500578523f};
const std::vector<double> kNesterov64 = {0.35056756198049993, -1.07925414924625,
    1.9513978522819999, -1.2052648288500001, 1.3064305959857501, -0.29758947034229999,
    -1.3193682664449002};
const std::vector<float> kNesterov32 = {0.350567549f, -1.07925415f, 1.9513979f, -1.20526481f,
    1.30643058f, -0.297589481f, -1.31936824f};
// clang-format on

template <class T, class Step>
std::vector<T> run_steps(Step step) {
    std::vector<T> p(kP0.begin(), kP0.end()), m(p.size(), T(0)), v(p.size(), T(0));
    for (int s = 0; s < 3; ++s) {
        const auto g64 = grad_at(s);
        const std::vector<T> g(g64.begin(), g64.end());
        step(p.data(), g.data(), m.data(), v.data(), int64_t(p.size()), s);
    }
    return p;
}

TEST(AdamKernels, MatchPyTorchGolden) {
    for (bool decoupled : {false, true}) {
        const auto& want64 = decoupled ? kAdamW64 : kAdam64;
        const auto& want32 = decoupled ? kAdamW32 : kAdam32;
        const auto got64   = run_steps<double>([&](double* p, const double* g, double* m, double* v,
                                                 int64_t n, int s) {
            ref::adam_step<double>({p, g, m, v, n, 0.01, 0.9, 0.999, 1e-8, 0.1, decoupled, s + 1});
        });
        EXPECT_TRUE(all_close(got64, want64, 1e-15, 1e-13)) << "decoupled=" << decoupled;
        for (Isa isa : available_isas()) {
            IsaGuard guard(isa);
            const auto got32 = run_steps<float>(
                [&](float* p, const float* g, float* m, float* v, int64_t n, int s) {
                    cpu::adam_step({p, g, m, v, n, 0.01, 0.9, 0.999, 1e-8, 0.1, decoupled, s + 1});
                });
            EXPECT_TRUE(all_close(got32, want32, kTolElemAtol, kTolElemRtol))
                << cpu::isa_name(isa) << " decoupled=" << decoupled;
        }
    }
}

TEST(SgdKernels, MatchPyTorchGolden) {
    for (bool nesterov : {false, true}) {
        const double damp  = nesterov ? 0.0 : 0.1;
        const auto& want64 = nesterov ? kNesterov64 : kSgd64;
        const auto& want32 = nesterov ? kNesterov32 : kSgd32;
        const auto got64   = run_steps<double>(
            [&](double* p, const double* g, double* buf, double*, int64_t n, int s) {
                ref::sgd_step<double>({p, g, buf, n, 0.1, 0.9, damp, 0.01, nesterov, s == 0});
            });
        EXPECT_TRUE(all_close(got64, want64, 1e-15, 1e-13)) << "nesterov=" << nesterov;
        const auto got32 =
            run_steps<float>([&](float* p, const float* g, float* buf, float*, int64_t n, int s) {
                cpu::sgd_step({p, g, buf, n, 0.1, 0.9, damp, 0.01, nesterov, s == 0});
            });
        EXPECT_TRUE(all_close(got32, want32, kTolElemAtol, kTolElemRtol))
            << "nesterov=" << nesterov;
    }
}

// ---- fast vs ref<double>, element-wise, five steps ---------------------------------------------

TEST(AdamKernels, FastMatchesRef_OddSizes) {
    struct Hyper {
        double wd;
        bool decoupled;
    };
    uint64_t seed = 1;
    for (int64_t n : {1, 7, 17, 1000, 17496, 100003})
        for (Hyper h : {Hyper{0.0, false}, Hyper{0.01, false}, Hyper{0.05, true}}) {
            const auto p0 = random_floats(n, seed++);
            for (Isa isa : available_isas()) {
                IsaGuard guard(isa);
                std::vector<float> p    = p0, m(n, 0.f), v(n, 0.f);
                std::vector<double> p64 = to_double(p0), m64(n, 0.0), v64(n, 0.0);
                for (int64_t step = 1; step <= 5; ++step) {
                    const auto g   = random_floats(n, seed + 100 * step, -2.f, 2.f);
                    const auto g64 = to_double(g);
                    cpu::adam_step({p.data(), g.data(), m.data(), v.data(), n, 1e-3, 0.9, 0.999, 1e-8, h.wd, h.decoupled, step});
                    ref::adam_step<double>({p64.data(), g64.data(), m64.data(), v64.data(), n, 1e-3, 0.9, 0.999, 1e-8, h.wd, h.decoupled, step});
                }
                const auto where = ::testing::Message()
                                   << cpu::isa_name(isa) << " n=" << n << " wd=" << h.wd
                                   << " decoupled=" << h.decoupled;
                EXPECT_TRUE(all_close(p, p64, kTolElemAtol, kTolElemRtol)) << "param " << where;
                EXPECT_TRUE(all_close(m, m64, kTolElemAtol, kTolElemRtol)) << "m " << where;
                EXPECT_TRUE(all_close(v, v64, kTolElemAtol, kTolElemRtol)) << "v " << where;
            }
        }
}

TEST(SgdKernels, FastMatchesRef_AllOptions) {
    struct Opt {
        double momentum, dampening, wd;
        bool nesterov;
    };
    uint64_t seed = 500;
    for (int64_t n : {1, 17, 100003})
        for (Opt o : {Opt{0.0, 0.0, 0.0, false}, Opt{0.9, 0.0, 0.0, false},
                      Opt{0.9, 0.5, 1e-4, false}, Opt{0.8, 0.0, 1e-3, true}}) {
            const auto p0           = random_floats(n, seed++);
            std::vector<float> p    = p0, buf(n, 0.f);
            std::vector<double> p64 = to_double(p0), buf64(n, 0.0);
            for (int step = 0; step < 4; ++step) {
                const auto g   = random_floats(n, seed + 100 * step);
                const auto g64 = to_double(g);
                cpu::sgd_step({p.data(), g.data(), o.momentum != 0 ? buf.data() : nullptr, n, 0.05, o.momentum, o.dampening, o.wd, o.nesterov, step == 0});
                ref::sgd_step<double>({p64.data(), g64.data(), o.momentum != 0 ? buf64.data() : nullptr, n, 0.05, o.momentum, o.dampening, o.wd, o.nesterov, step == 0});
            }
            EXPECT_TRUE(all_close(p, p64, kTolElemAtol, kTolElemRtol))
                << "n=" << n << " momentum=" << o.momentum << " nesterov=" << o.nesterov;
            EXPECT_TRUE(all_close(buf, buf64, kTolElemAtol, kTolElemRtol)) << "n=" << n;
        }
}

}  // namespace
