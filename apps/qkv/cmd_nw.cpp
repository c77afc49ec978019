// `qkv nw`: the seed's Nadaraya–Watson experiment (shared/seeds/000), D2L ZH's variant
// (--preset zh) and the non-parametric estimator (--kernel-width). Trains, predicts on
// x_test = 0, 0.1, ..., 4.9, prints per-epoch lines and writes the plots and a history CSV.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "commands.h"
#include "options.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/generator.h"
#include "qkv/models/nadaraya_watson.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/reduce.h"
#include "qkv/util/plot.h"

namespace qkv::cli {
namespace {

/// Leave-one-out training holds several (n, n − 1) tensors (and their gradients): 5000 points
/// take about 1 GB; more is refused with a message rather than exhausting memory.
constexpr int64_t kMaxTrainPoints = 5000;
/// The most generated points (--n-train) the attention heatmap can draw: a 5 px column each, within
/// util::kMaxCanvasPx (3970 points make 20000 px with the margins). A --data file of more rows is
/// refused by the same canvas check, naming the file.
constexpr int64_t kMaxDrawnPoints = 3900;

struct NwArgs {
    std::string preset = "seed";
    int64_t n_train    = 0;  // 0: the preset's
    int64_t epochs     = -1;
    double lr          = 0.5;
    uint64_t seed      = 0;
    std::string data, out = "out/nw";
    double kernel_width = 0;  // > 0: non-parametric, no training
};

std::vector<double> as_doubles(const Tensor& t) {
    std::vector<double> v;
    for (float x : t.contiguous().to_vector<float>()) v.push_back(x);
    return v;
}

void save_both(const util::LinePlot& p, const std::string& stem) {
    p.save(stem + ".png");
    p.save(stem + ".svg");
}

/// The (test queries, training points) attention heatmap, 5 px per cell.
util::Heatmap attention_heatmap(std::vector<double> values, int64_t rows, int64_t cols) {
    util::Heatmap heat(std::move(values), rows, cols);
    heat.title  = "attention weights";
    heat.xlabel = "Sorted training inputs", heat.ylabel = "Sorted testing inputs";
    heat.cell_px = 5;  // 50 test rows stay readable (250 px) with index ticks every 10
    return heat;
}

/// Refuses a result that is not finite, before any output is written (the plots would show nothing
/// and the MSE would print as nan). A query whose Gaussian scores −(q − k)²/(2σ²) all overflow
/// float32 to −inf (a tiny --kernel-width, a learned w blown up by a large --lr, or keys far from
/// every query) has no weights; values whose weighted sum overflows float32 give no prediction.
void check_finite(const NwArgs& a, const models::NWData& d, const models::NWResult& r, double w_learned) {
    const std::vector<float> w = r.attention_weights.contiguous().to_vector<float>();
    const int64_t m = r.attention_weights.size(1);
    const std::vector<float> xq = d.x_test.contiguous().to_vector<float>();
    for (size_t i = 0; i < xq.size(); ++i) {
        bool ok = true;
        for (int64_t j = 0; j < m && ok; ++j) ok = std::isfinite(w[i * size_t(m) + size_t(j)]);
        if (ok) continue;
        char q[32];
        std::snprintf(q, sizeof q, "%g", double(xq[i]));
        const std::string why = std::string("the Gaussian kernel underflows: exp(-(q-k)^2 / (2 sigma^2)) is 0 in "
                                            "float32 for every training point of the test query x = ") + q;
        if (a.kernel_width > 0) {
            char s[32];
            std::snprintf(s, sizeof s, "%g", a.kernel_width);
            usage_error("--kernel-width " + std::string(s) + ": " + why + "; use a wider kernel");
        }
        QKV_CHECK(false, "the learned w = ", w_learned, " (after SGD with --lr ", a.lr, "): ", why,
                  "; lower --lr or --epochs");
    }
    for (float p : r.predictions.contiguous().to_vector<float>())
        QKV_CHECK(std::isfinite(p), "the predictions overflow float32 (a weighted sum of the training y values ",
                  "is beyond 3.4e38)", a.data.empty() ? "" : "; scale the y values in '" + a.data + "' down");
}

/// The training points (--data, else the preset's recipe) and the test queries; refuses more
/// points than fit in memory or in the attention heatmap, before training. Prints the summary.
models::NWData load_data(const NwArgs& a, models::NWPreset preset, Generator& gen) {
    using namespace models;
    const bool zh = preset == NWPreset::zh;
    NWData d;
    if (!a.data.empty()) {
        std::tie(d.x_train, d.y_train) = read_xy_csv(a.data);
        d.x_test = nw_test_inputs();
    } else {
        d = make_nw_data(preset, a.n_train > 0 ? a.n_train : (zh ? 50 : 150), gen);
    }
    const int64_t n = d.x_train.size(0);
    QKV_CHECK(n <= kMaxTrainPoints, "nw: ", n, " training points: at most ", kMaxTrainPoints,
              " are supported (the leave-one-out problem needs n^2 memory)");
    // The heatmap has a column per training point: check it can be drawn before training, not after.
    const int64_t nq     = d.x_test.size(0);
    const auto [cw, ch]  = attention_heatmap(std::vector<double>(size_t(nq * n), 0.0), nq, n).canvas_size();
    const std::string px = std::to_string(cw) + "x" + std::to_string(ch) + " px (at most " +
                           std::to_string(util::kMaxCanvasPx) + " each way)";
    if (a.data.empty() && (cw > util::kMaxCanvasPx || ch > util::kMaxCanvasPx))
        usage_error("--n-train " + std::to_string(n) + ": the attention heatmap would be " + px + "; use fewer points");
    QKV_CHECK(cw <= util::kMaxCanvasPx && ch <= util::kMaxCanvasPx, a.data, ": ", n,
              " training points make the attention heatmap ", px, "; use fewer rows");
    std::printf("Nadaraya-Watson (%s): %lld training points%s, %lld test queries\n",
                zh ? "D2L ZH preset" : "seed experiment", (long long)n,
                a.data.empty() ? "" : (" from " + a.data).c_str(), (long long)d.x_test.size(0));
    return d;
}

/// The test queries' predictions and weights, and the training history (empty without training).
struct NwFit {
    models::NWResult test;
    std::vector<models::NWEpoch> hist;
    double w_learned = 0;  // the parametric kernel's w after training
};

/// The parametric model trained on d (printing each epoch as the seed or D2L ZH does), or the
/// non-parametric kernel of --kernel-width; then applied to the test queries.
NwFit fit_model(const NwArgs& a, const models::NWData& d, bool zh, Generator& gen) {
    using namespace models;
    NwFit f;
    if (a.kernel_width > 0) {
        std::printf("non-parametric Gaussian kernel, width sigma = %g (no training)\n", a.kernel_width);
        NoGradGuard ng;
        f.test = nadaraya_watson(d.x_test, d.x_train, d.y_train, a.kernel_width);
        return f;
    }
    // The seed initialises w to 1.0; D2L ZH draws it from U[0, 1).
    const double w0 = zh ? gen.uniform() : 1.0;
    NWKernelRegression model(w0);
    NWTrainConfig cfg;
    cfg.epochs = a.epochs >= 0 ? a.epochs : (zh ? 5 : 20);
    cfg.lr     = a.lr;
    cfg.loss   = zh ? NWLoss::sum : NWLoss::mean;
    std::printf("parametric kernel, w0 = %.4f, SGD lr %g, %lld epoch%s, loss %s\n", w0, cfg.lr,
                (long long)cfg.epochs, cfg.epochs == 1 ? "" : "s", zh ? "sum of squared errors" : "MSE (mean)");
    f.hist = train_nw(model, d.x_train, d.y_train, cfg, [zh](const NWEpoch& e) {
        if (zh)  // D2L ZH's print
            std::printf("epoch %lld, loss %.6f\n", (long long)e.epoch, e.loss);
        else  // the seed's print
            std::printf("epoch %02lld, loss = %.4f, w = %.4f\n", (long long)e.epoch, e.loss, e.w);
        std::fflush(stdout);
    });
    NoGradGuard ng;
    f.test.predictions       = model.forward(d.x_test, d.x_train, d.y_train);
    f.test.attention_weights = model.attention_weights();
    f.w_learned              = model.w.item();
    return f;
}

/// fit.png/.svg: the training points, the true function (when known) and the predictions.
void plot_fit(const NwArgs& a, const models::NWData& d, const models::NWResult& test, const std::string& out) {
    util::LinePlot fit;
    fit.width = 640, fit.height = 420;
    fit.title  = a.kernel_width > 0 ? "Nadaraya-Watson, Gaussian kernel" : "Nadaraya-Watson, learned w";
    fit.xlabel = "x", fit.ylabel = "y";
    util::Series pts;
    pts.label = "train data", pts.x = as_doubles(d.x_train), pts.y = as_doubles(d.y_train);
    pts.line = false, pts.marker = util::Marker::circle;
    pts.color = util::Color{0.12, 0.47, 0.71, 0.5};
    fit.add(pts);
    if (d.y_true.defined()) {
        util::Series truth;
        truth.label = "true function", truth.x = as_doubles(d.x_test), truth.y = as_doubles(d.y_true);
        truth.color = util::series_color(1), truth.dashed = true;
        fit.add(truth);
    }
    util::Series pred;
    pred.label = "NW prediction", pred.x = as_doubles(d.x_test), pred.y = as_doubles(test.predictions);
    pred.color = util::series_color(2);
    fit.add(pred);
    save_both(fit, out + "fit");
}

/// history.csv and loss.png/.svg of a training run.
void write_history(const std::vector<models::NWEpoch>& hist, bool zh, const std::string& out) {
    std::ofstream csv(out + "history.csv");
    csv << "epoch,loss,w\n";
    char buf[96];
    for (const auto& e : hist) {
        std::snprintf(buf, sizeof buf, "%lld,%.9g,%.9g\n", (long long)e.epoch, e.loss, e.w);
        csv << buf;
    }
    QKV_CHECK(csv.good(), "nw: cannot write '", out, "history.csv'");
    util::LinePlot lp;
    lp.width = 640, lp.height = 420;
    lp.title = "training loss", lp.xlabel = "epoch", lp.ylabel = zh ? "sum of squared errors" : "MSE";
    lp.legend = util::LegendPos::none;
    util::Series s;
    for (const auto& e : hist) s.x.push_back(double(e.epoch)), s.y.push_back(e.loss);
    s.marker = util::Marker::circle;
    lp.add(s);
    save_both(lp, out + "loss");
}

void run_nw(const NwArgs& a) {
    using namespace models;
    check_out_folder("--out", a.out);  // before training, not after it (a usage error, exit 2)
    const NWPreset preset = a.preset == "zh" ? NWPreset::zh : NWPreset::seed;
    const bool zh         = preset == NWPreset::zh;
    Generator gen(a.seed);
    const NWData d = load_data(a, preset, gen);
    const NwFit f  = fit_model(a, d, zh, gen);
    check_finite(a, d, f.test, f.w_learned);
    if (d.y_true.defined()) {
        const double mse = mean(pow(sub(f.test.predictions, d.y_true), 2.0)).item();
        std::printf("test MSE against the true function: %.4f\n", mse);
    }

    std::filesystem::create_directories(a.out);
    const std::string out = a.out + "/";
    plot_fit(a, d, f.test, out);
    const util::Heatmap heat = attention_heatmap(as_doubles(f.test.attention_weights), f.test.attention_weights.size(0),
                                                 f.test.attention_weights.size(1));
    heat.save(out + "attention.png");
    heat.save(out + "attention.svg");
    const auto [hw, hh] = heat.canvas_size();
    std::printf("wrote %sfit.png and .svg (640x420 px), %sattention.png and .svg (%dx%d px)",
                out.c_str(), out.c_str(), hw, hh);
    if (!f.hist.empty()) {
        write_history(f.hist, zh, out);
        std::printf(", %sloss.png and .svg, %shistory.csv", out.c_str(), out.c_str());
    } else {
        // No training, no loss curve: an earlier run's in the same folder would pass for this one's.
        for (const char* name : {"loss.png", "loss.svg", "history.csv"}) std::filesystem::remove(out + name);
    }
    std::printf("\n");
}

Registration reg([](CLI::App& app) {
    auto a   = std::make_shared<NwArgs>();
    auto* sc = app.add_subcommand("nw", "Nadaraya-Watson kernel regression as attention pooling "
                                        "(the seed experiment; D2L 11.2 / ZH 10.2)");
    sc->add_option("--preset", a->preset, "seed: 150 points, 2.333 sin x + x^0.666, w0 = 1, MSE, "
                                          "20 epochs; zh: D2L ZH, 50 points, 2 sin x + x^0.8, "
                                          "w0 ~ U[0,1), summed loss, 5 epochs")
        ->check(CLI::IsMember({"seed", "zh"}))
        ->capture_default_str();
    auto* n = sc->add_option("--n-train", a->n_train, "number of generated training points "
                                                      "(default: 150, or 50 with --preset zh)")
                  ->transform(int_range(2, kMaxDrawnPoints));
    // 0 epochs would only plot the initial w, with no loss curve or history: that untrained kernel
    // is --kernel-width 1/w (the seed's w0 = 1: sigma 1), so 0 is a usage error.
    auto* ep = sc->add_option("--epochs", a->epochs, "SGD epochs (default: 20, or 5 with --preset zh; "
                                                     "no training: --kernel-width)")
        ->transform(int_range(1, 1000000));
    auto* lr = sc->add_option("--lr", a->lr, "SGD learning rate")
                   ->check(real_range(0, 1000, /*lo_open=*/true))
                   ->capture_default_str();
    sc->add_option("--seed", a->seed, "seed of the data generator (and of w0 with --preset zh)")
        ->transform(seed_value())
        ->capture_default_str();
    sc->add_option("--data", a->data, "CSV of x,y training pairs (header line allowed) instead of "
                                      "generated data (default: none, generated)")
        ->check(non_empty_path())
        ->check(CLI::ExistingFile)
        ->excludes(n);
    sc->add_option("--out", a->out, "output folder for plots and history.csv (a --kernel-width run removes "
                                    "an earlier run's loss plot and history.csv)")
        ->check(non_empty_path())
        ->capture_default_str();
    sc->add_option("--kernel-width", a->kernel_width, "non-parametric Gaussian kernel of this "
                                                      "width sigma: exp(-(q-k)^2 / (2 sigma^2)); "
                                                      "no training (default: none, the width is learned)")
        ->check(real_range(0, 1e6, /*lo_open=*/true))
        ->excludes(ep)
        ->excludes(lr);
    sc->callback([a] { run_nw(*a); });
});

}  // namespace
}  // namespace qkv::cli
