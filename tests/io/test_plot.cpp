// Plots: each kind written as PNG and SVG; the PNG decodes with the expected size and is not
// blank, the SVG is an SVG document. Also nice_ticks and the colour maps.
#include <gtest/gtest.h>

#include <cairo.h>
#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "support/temp_dir.h"
#include "qkv/core/error.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/plot.h"

namespace qkv::util {
namespace {

using qkv::test::TempDir;

// Drops cairo's and fontconfig's process-wide caches at exit so LeakSanitizer (QKV_SANITIZE)
// reports only real leaks. FcFini is looked up at run time: fontconfig is loaded as cairo's
// dependency but not linked by the tests.
class CairoCaches : public ::testing::Environment {
public:
    void TearDown() override {
        cairo_debug_reset_static_data();
        if (auto* fc_fini = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "FcFini"))) fc_fini();
    }
};
const auto* const kCairoCaches = ::testing::AddGlobalTestEnvironment(new CairoCaches);

struct PngInfo {
    int width = 0, height = 0;
    int64_t non_white = 0, reddish = 0;
};

PngInfo inspect_png(const std::string& path) {
    cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
    PngInfo info;
    EXPECT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS) << path;
    if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
        info.width  = cairo_image_surface_get_width(s);
        info.height = cairo_image_surface_get_height(s);
        const int stride = cairo_image_surface_get_stride(s);
        const unsigned char* d = cairo_image_surface_get_data(s);
        for (int y = 0; y < info.height; ++y)
            for (int x = 0; x < info.width; ++x) {
                uint32_t px;
                std::memcpy(&px, d + y * stride + 4 * x, 4);
                const int r = (px >> 16) & 255, g = (px >> 8) & 255, b = px & 255;
                info.non_white += (r < 250 || g < 250 || b < 250);
                info.reddish += (r > 90 && 2 * g < r && 2 * b < r);
            }
    }
    cairo_surface_destroy(s);
    return info;
}

void expect_svg(const std::string& path) {
    const std::string s = read_file(path);
    EXPECT_EQ(s.rfind("<?xml", 0), 0u) << path;
    EXPECT_NE(s.find("<svg"), std::string::npos) << path;
    EXPECT_NE(s.find("</svg>"), std::string::npos) << path;
}

Series make_series(std::string label, std::vector<double> x = {}, std::vector<double> y = {}) {
    Series s;
    s.label = std::move(label);
    s.x     = std::move(x);
    s.y     = std::move(y);
    return s;
}

LinePlot sample_line_plot() {
    LinePlot p;
    p.title  = "Training loss";
    p.xlabel = "epoch";
    p.ylabel = "loss";
    Series train = make_series("train");
    Series val = make_series("val");
    val.marker = Marker::circle;
    val.dashed = true;
    for (int i = 0; i <= 30; ++i) {
        train.x.push_back(i);
        train.y.push_back(4.6 * std::exp(-i / 6.0) + 0.2);
        if (i % 5 == 0) {
            val.x.push_back(i);
            val.y.push_back(3.5 * std::exp(-i / 8.0) + 1.7);
        }
    }
    Series pts = make_series("points", {2, 12, 22}, {3.0, 2.5, std::nan("")});
    pts.line   = false;
    pts.marker = Marker::triangle;
    p.add(train).add(val).add(pts);
    return p;
}

TEST(Plot, LinePlotPngAndSvg) {
    TempDir dir;
    const LinePlot p = sample_line_plot();
    p.save(dir / "loss.png");
    p.save(dir / "loss.svg");
    const PngInfo info = inspect_png(dir / "loss.png");
    EXPECT_EQ(info.width, 640);
    EXPECT_EQ(info.height, 420);
    EXPECT_GT(info.non_white, 2000);  // frame, text, two curves
    expect_svg(dir / "loss.svg");
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 2);
}

TEST(Plot, HeatmapWithTokenLabels) {
    TempDir dir;
    const std::vector<std::string> src = {"i", "'m", "calm", ".", "<eos>"};
    const std::vector<std::string> tgt = {"je", "suis", "calme", ".", "<eos>", "<pad>"};
    std::vector<double> w;
    for (size_t i = 0; i < tgt.size(); ++i)
        for (size_t j = 0; j < src.size(); ++j) w.push_back(i == j ? 0.8 : 0.2 / 4);
    Heatmap h(w, int64_t(tgt.size()), int64_t(src.size()));
    h.title      = "Encoder-decoder attention";
    h.xlabel     = "Keys";
    h.ylabel     = "Queries";
    h.row_labels = tgt;
    h.col_labels = src;
    h.save(dir / "h.png");
    h.save(dir / "h.svg");
    const auto [cw, ch] = h.canvas_size();
    const PngInfo info  = inspect_png(dir / "h.png");
    EXPECT_EQ(info.width, cw);
    EXPECT_EQ(info.height, ch);
    EXPECT_GT(info.reddish, 5 * 40 * 40);  // the 5 diagonal cells are dark red (Reds map)
    expect_svg(dir / "h.svg");
}

TEST(Plot, HeatmapGridLayersByHeads) {
    TempDir dir;
    HeatmapGrid g(2, 4);
    g.xlabel = "Key positions";
    g.ylabel = "Query positions";
    for (int l = 0; l < 2; ++l)
        for (int hd = 0; hd < 4; ++hd) {
            HeatmapPanel p{{}, 10, 10, "Head " + std::to_string(hd + 1)};
            for (int i = 0; i < 10; ++i)
                for (int j = 0; j < 10; ++j)
                    p.values.push_back(j <= i ? std::exp(-std::abs(i - j - hd) * (l + 1.0)) : 0.0);
            g.set(l, hd, std::move(p));
        }
    g.save(dir / "grid.png");
    g.save(dir / "grid.svg");
    const auto [cw, ch] = g.canvas_size();
    const PngInfo info  = inspect_png(dir / "grid.png");
    EXPECT_EQ(info.width, cw);
    EXPECT_EQ(info.height, ch);
    EXPECT_GT(cw, 4 * 200);  // four ~220 px panels side by side
    EXPECT_GT(info.reddish, 1000);
    expect_svg(dir / "grid.svg");
}

TEST(Plot, ErrorsNameTheProblem) {
    TempDir dir;
    LinePlot p = sample_line_plot();
    EXPECT_THROW(p.save(dir / "x.jpg"), Error);
    EXPECT_THROW(p.add(make_series("bad", {1, 2}, {1})), Error);
    p.width = 50;
    EXPECT_THROW(p.save(dir / "small.png"), Error);
    HeatmapGrid g(1, 2);
    g.set(0, 0, {{1, 2, 3, 4}, 2, 2, ""});
    try {
        g.save(dir / "g.png");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("panel (0, 1) was never set"), std::string::npos);
    }
    EXPECT_THROW(g.set(0, 1, {{1, 2, 3}, 2, 2, ""}), Error);
    EXPECT_THROW(g.set(1, 0, {{1}, 1, 1, ""}), Error);
    Heatmap h({1, 2}, 1, 2);
    h.col_labels = {"a"};
    EXPECT_THROW(h.save(dir / "h.png"), Error);
    EXPECT_THROW(Heatmap({1, 2, 3}, 2, 2), Error);
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Plot, CanvasSidesUpToTheNamedLimit) {
    TempDir dir;
    LinePlot p = sample_line_plot();
    p.width = kMaxCanvasPx;  // SVG: nothing of that size is allocated
    p.save(dir / "wide.svg");
    EXPECT_TRUE(std::filesystem::exists(dir / "wide.svg"));
    p.width = kMaxCanvasPx + 1;
    try {
        p.save(dir / "wider.svg");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("canvas " + std::to_string(kMaxCanvasPx + 1) +
                                             "x420 px is out of range (16 to " + std::to_string(kMaxCanvasPx) +
                                             " each way)"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "wider.svg"));
}

TEST(Plot, DegenerateDataStillRenders) {
    TempDir dir;
    LinePlot p;
    p.add(make_series("const", {0, 1, 2}, {5, 5, 5}));
    p.save(dir / "const.png");
    LinePlot empty;
    empty.save(dir / "empty.png");
    Heatmap h({0.5, 0.5, std::nan(""), 0.5}, 2, 2);  // constant + a NaN cell
    h.save(dir / "flat.png");
    EXPECT_EQ(inspect_png(dir / "const.png").width, 640);
    EXPECT_GT(inspect_png(dir / "flat.png").non_white, 100);
}

TEST(Plot, NiceTicks) {
    EXPECT_EQ(nice_ticks(0, 1, 6), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0}));
    EXPECT_EQ(nice_ticks(0, 30, 6), (std::vector<double>{0, 5, 10, 15, 20, 25, 30}));
    EXPECT_EQ(nice_ticks(-0.13, 4.9, 4), (std::vector<double>{0, 2, 4}));
    EXPECT_EQ(nice_ticks(0, 9, 5), (std::vector<double>{0, 2.5, 5, 7.5}));
    EXPECT_EQ(nice_ticks(3, 3), (std::vector<double>{3}));
    EXPECT_TRUE(nice_ticks(0, std::nan("")).empty());
    const auto t = nice_ticks(1e-3, 2.2e-3, 6);
    ASSERT_FALSE(t.empty());
    EXPECT_NEAR(t[1] - t[0], 2.5e-4, 1e-12);  // raw step 2.4e-4 rounds to 2.5
}

TEST(Plot, ColorMapsAreSequential) {
    for (ColorMap m : {ColorMap::reds, ColorMap::blues, ColorMap::greys}) {
        double prev = 4;
        for (int k = 0; k <= 10; ++k) {
            const Color c = colormap(m, k / 10.0);
            const double lum = c.r + c.g + c.b;
            EXPECT_LT(lum, prev);  // darker as the value grows
            prev = lum;
        }
    }
    const Color lo = colormap(ColorMap::reds, -1), hi = colormap(ColorMap::reds, 2);
    EXPECT_NEAR(lo.r, 1.0, 1e-12);  // #fff5f0
    EXPECT_NEAR(hi.r, 0x67 / 255.0, 1e-12);
}

}  // namespace
}  // namespace qkv::util
