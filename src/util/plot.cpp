// cairo rendering of LinePlot / HeatmapGrid (util/plot.h). One draw function per plot kind
// renders onto any cairo context; save() picks an image (PNG) or SVG surface by extension and
// writes the bytes with write_file_atomic. Layout is computed from measured text extents.
#include "qkv/util/plot.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/util/atomic_file.h"

namespace qkv::util {
namespace {

constexpr const char* kFont = "DejaVu Sans";
constexpr double kTitlePt = 15, kLabelPt = 13, kTickPt = 11;

bool ends_with(const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

cairo_status_t append_bytes(void* closure, const unsigned char* data, unsigned int n) {
    static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), n);
    return CAIRO_STATUS_SUCCESS;
}

// Renders draw(cr) on a white w × h canvas and writes PNG or SVG to `path`.
void render_to_file(const std::string& path, int w, int h, const std::function<void(cairo_t*)>& draw,
                    const char* what) {
    const bool png = ends_with(path, ".png"), svg = ends_with(path, ".svg");
    QKV_CHECK(png || svg, what, ": '", path, "': unknown extension (use .png or .svg)");
    QKV_CHECK(w >= 16 && h >= 16 && w <= kMaxCanvasPx && h <= kMaxCanvasPx, what, ": '", path, "': canvas ", w,
              "x", h, " px is out of range (16 to ", kMaxCanvasPx, " each way)");
    std::string bytes;
    cairo_surface_t* s = png ? cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h)
                             : cairo_svg_surface_create_for_stream(append_bytes, &bytes, w, h);
    std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surf(s, &cairo_surface_destroy);
    QKV_CHECK(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS, what, ": '", path,
              "': cannot create surface: ", cairo_status_to_string(cairo_surface_status(s)));
    // The context holds a reference to the surface: both are released if draw() throws.
    std::unique_ptr<cairo_t, decltype(&cairo_destroy)> ctx(cairo_create(s), &cairo_destroy);
    cairo_t* cr = ctx.get();
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    draw(cr);
    const cairo_status_t st = cairo_status(cr);
    ctx.reset();
    QKV_CHECK(st == CAIRO_STATUS_SUCCESS, what, ": '", path, "': drawing failed: ",
              cairo_status_to_string(st));
    if (png) {
        cairo_surface_flush(s);
        const cairo_status_t ws = cairo_surface_write_to_png_stream(s, append_bytes, &bytes);
        QKV_CHECK(ws == CAIRO_STATUS_SUCCESS, what, ": '", path, "': PNG encoding failed: ",
                  cairo_status_to_string(ws));
    } else {
        cairo_surface_finish(s);
        QKV_CHECK(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS, what, ": '", path,
                  "': SVG output failed: ", cairo_status_to_string(cairo_surface_status(s)));
    }
    write_file_atomic(path, bytes);
}

void set_color(cairo_t* cr, const Color& c) { cairo_set_source_rgba(cr, c.r, c.g, c.b, c.a); }

void set_font(cairo_t* cr, double pt, bool bold = false) {
    cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, pt);
}

double text_width(cairo_t* cr, const std::string& s) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s.c_str(), &e);
    return e.x_advance;
}

double font_height(cairo_t* cr) {
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    return fe.ascent + fe.descent;
}

// Draws `s` with its anchor at (x, y): ha 0/0.5/1 = left/centre/right, va 0/0.5/1 =
// top/middle/bottom of the font box; angle in radians (counter-clockwise on screen for < 0).
void draw_text(cairo_t* cr, const std::string& s, double x, double y, double ha, double va,
               double angle = 0) {
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    const double w = text_width(cr, s);
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, angle);
    cairo_move_to(cr, -ha * w, fe.ascent - va * (fe.ascent + fe.descent));
    cairo_show_text(cr, s.c_str());
    cairo_restore(cr);
}

// Tick label with as many decimals as the step needs ("0.25", "100", "1e-05").
std::string tick_label(double v, double step) {
    char buf[32];
    const double mag = std::max(std::abs(v), std::abs(step));
    if (mag >= 1e6 || (mag > 0 && std::abs(step) < 1e-4)) {
        std::snprintf(buf, sizeof buf, "%.3g", v);
    } else {
        int dec = 0;
        while (dec < 8 && std::abs(step * std::pow(10.0, dec) -
                                   std::round(step * std::pow(10.0, dec))) > 1e-6)
            ++dec;
        std::snprintf(buf, sizeof buf, "%.*f", dec, v);
    }
    std::string s = buf;
    if (s.find_first_not_of("-0.") == std::string::npos) s = "0";  // "-0.00" -> "0"
    return s;
}

double tick_step(const std::vector<double>& t) { return t.size() > 1 ? t[1] - t[0] : 1.0; }

void draw_marker(cairo_t* cr, Marker m, double x, double y, double r) {
    switch (m) {
        case Marker::none: return;
        case Marker::circle:
            cairo_new_sub_path(cr);
            cairo_arc(cr, x, y, r, 0, 2 * M_PI);
            cairo_fill(cr);
            return;
        case Marker::square:
            cairo_rectangle(cr, x - r, y - r, 2 * r, 2 * r);
            cairo_fill(cr);
            return;
        case Marker::triangle:
            cairo_move_to(cr, x, y - 1.2 * r);
            cairo_line_to(cr, x + 1.1 * r, y + 0.8 * r);
            cairo_line_to(cr, x - 1.1 * r, y + 0.8 * r);
            cairo_close_path(cr);
            cairo_fill(cr);
            return;
        case Marker::cross:
            cairo_move_to(cr, x - r, y - r);
            cairo_line_to(cr, x + r, y + r);
            cairo_move_to(cr, x - r, y + r);
            cairo_line_to(cr, x + r, y - r);
            cairo_stroke(cr);
            return;
    }
}

std::pair<double, double> padded_range(double lo, double hi) {
    if (!(lo <= hi)) return {0.0, 1.0};  // no finite data
    if (lo == hi) {
        const double d = lo == 0 ? 0.5 : std::abs(lo) * 0.1;
        return {lo - d, hi + d};
    }
    const double pad = 0.04 * (hi - lo);
    return {lo - pad, hi + pad};
}

// Integer ticks over 0..n-1 for cell indices: a nice step of at least 1, rounded down to an
// integer (2.5 -> 2).
std::vector<int64_t> index_ticks(int64_t n, int target) {
    std::vector<int64_t> t;
    if (n <= 1) return {0};
    // Step = the smallest 1, 2 or 5 × 10^k that fits at most max(2, target) labels, never < 1
    // (nice_ticks can return a single tick for short panels, which used to label every index).
    const double raw  = double(n - 1) / double(std::max(2, target) - 1);
    const double mag  = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-9))));
    const double f    = raw / mag;
    const double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    const int64_t s   = std::max<int64_t>(1, int64_t(std::llround(nice * mag)));
    for (int64_t i = 0; i < n; i += s) t.push_back(i);
    return t;
}

Color hex(uint32_t v) {
    return {((v >> 16) & 255) / 255.0, ((v >> 8) & 255) / 255.0, (v & 255) / 255.0, 1.0};
}

}  // namespace

// ---- shared helpers -----------------------------------------------------------------------------

std::vector<double> nice_ticks(double lo, double hi, int target) {
    if (!std::isfinite(lo) || !std::isfinite(hi) || target < 2) return {};
    if (lo > hi) std::swap(lo, hi);
    if (lo == hi) return {lo};
    const double raw  = (hi - lo) / (target - 1);
    const int e10     = int(std::floor(std::log10(raw)));
    const double mag  = std::pow(10.0, e10);
    const double frac = raw / mag;
    const double nice = frac < 1.5 ? 1 : frac < 2.25 ? 2 : frac < 3.5 ? 2.5 : frac < 7.5 ? 5 : 10;
    const double step = nice * mag;
    // k * nice is exact and 10^|e10| is exact for |e10| <= 22, so one multiply or divide gives
    // the double nearest the decimal tick (0.6, not 0.6000000000000001).
    const double p10 = std::pow(10.0, std::abs(e10));
    auto value = [&](double k) { return e10 >= 0 ? k * nice * p10 : k * nice / p10; };
    std::vector<double> t;
    const double eps = step * 1e-9;
    for (double k = std::ceil((lo - eps) / step); value(k) <= hi + eps && t.size() < 1000; k += 1)
        t.push_back(k == 0 ? 0.0 : value(k));
    return t;
}

Color series_color(int i) {
    static const uint32_t tab10[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                     0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
    return hex(tab10[((i % 10) + 10) % 10]);
}

Color colormap(ColorMap cmap, double t) {
    // ColorBrewer 9-class sequential schemes; viridis sampled at 9 points.
    static const uint32_t reds[]  = {0xfff5f0, 0xfee0d2, 0xfcbba1, 0xfc9272, 0xfb6a4a,
                                     0xef3b2c, 0xcb181d, 0xa50f15, 0x67000d};
    static const uint32_t blues[] = {0xf7fbff, 0xdeebf7, 0xc6dbef, 0x9ecae1, 0x6baed6,
                                     0x4292c6, 0x2171b5, 0x08519c, 0x08306b};
    static const uint32_t greys[] = {0xffffff, 0xf0f0f0, 0xd9d9d9, 0xbdbdbd, 0x969696,
                                     0x737373, 0x525252, 0x252525, 0x000000};
    static const uint32_t viri[]  = {0x440154, 0x472d7b, 0x3b528b, 0x2c728e, 0x21918c,
                                     0x28ae80, 0x5ec962, 0xaddc30, 0xfde725};
    const uint32_t* p = cmap == ColorMap::reds ? reds : cmap == ColorMap::blues ? blues
                        : cmap == ColorMap::greys ? greys : viri;
    if (!std::isfinite(t)) t = 0;
    t = std::clamp(t, 0.0, 1.0) * 8.0;
    const int i = std::min(7, int(t));
    const double f = t - i;
    const Color a = hex(p[i]), b = hex(p[i + 1]);
    return {a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b), 1.0};
}

// ---- LinePlot -----------------------------------------------------------------------------------

LinePlot& LinePlot::add(Series s) {
    QKV_CHECK(s.x.size() == s.y.size(), "LinePlot::add: series '", s.label, "' has ", s.x.size(),
              " x values but ", s.y.size(), " y values");
    series_.push_back(std::move(s));
    return *this;
}

namespace {

/// The plot area in pixels and the data range it shows: X, Y map data to pixels.
struct PlotArea {
    double px0, px1, py0, py1;  // pixels
    double x0, x1, y0, y1;      // data
    double X(double x) const { return px0 + (x - x0) / (x1 - x0) * (px1 - px0); }
    double Y(double y) const { return py1 - (y - y0) / (y1 - y0) * (py1 - py0); }
};

/// The grid lines (when `grid`), then the ticks and their labels.
void draw_grid_and_ticks(cairo_t* cr, const PlotArea& a, const std::vector<double>& xt,
                         const std::vector<double>& yt, bool grid) {
    cairo_set_line_width(cr, 1);
    if (grid) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        for (double v : xt) {
            cairo_move_to(cr, std::round(a.X(v)) + 0.5, a.py0);
            cairo_line_to(cr, std::round(a.X(v)) + 0.5, a.py1);
        }
        for (double v : yt) {
            cairo_move_to(cr, a.px0, std::round(a.Y(v)) + 0.5);
            cairo_line_to(cr, a.px1, std::round(a.Y(v)) + 0.5);
        }
        cairo_stroke(cr);
    }
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    for (double v : xt) {
        cairo_move_to(cr, std::round(a.X(v)) + 0.5, a.py1);
        cairo_line_to(cr, std::round(a.X(v)) + 0.5, a.py1 + 5);
        draw_text(cr, tick_label(v, tick_step(xt)), a.X(v), a.py1 + 8, 0.5, 0);
    }
    for (double v : yt) {
        cairo_move_to(cr, a.px0 - 5, std::round(a.Y(v)) + 0.5);
        cairo_line_to(cr, a.px0, std::round(a.Y(v)) + 0.5);
        draw_text(cr, tick_label(v, tick_step(yt)), a.px0 - 8, a.Y(v), 1, 0.5);
    }
    cairo_stroke(cr);
}

/// The series' lines (broken at non-finite points) and markers, clipped to the plot area.
void draw_series(cairo_t* cr, const PlotArea& a, const std::vector<Series>& series) {
    cairo_save(cr);
    cairo_rectangle(cr, a.px0, a.py0, a.px1 - a.px0, a.py1 - a.py0);
    cairo_clip(cr);
    for (size_t k = 0; k < series.size(); ++k) {
        const Series& s = series[k];
        set_color(cr, s.color ? *s.color : series_color(int(k)));
        if (s.line) {
            cairo_set_line_width(cr, s.line_width);
            cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
            const double dash[] = {6, 4};
            cairo_set_dash(cr, dash, s.dashed ? 2 : 0, 0);
            bool pen = false;
            for (size_t i = 0; i < s.x.size(); ++i) {
                if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
                    pen = false;
                    continue;
                }
                (pen ? cairo_line_to : cairo_move_to)(cr, a.X(s.x[i]), a.Y(s.y[i]));
                pen = true;
            }
            cairo_stroke(cr);
            cairo_set_dash(cr, nullptr, 0, 0);
        }
        cairo_set_line_width(cr, 1.5);
        for (size_t i = 0; i < s.x.size(); ++i)
            if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]))
                draw_marker(cr, s.marker, a.X(s.x[i]), a.Y(s.y[i]), s.marker_size);
    }
    cairo_restore(cr);
}

/// The legend box of the labelled series in the corner `pos`; th is the tick font's height.
void draw_legend(cairo_t* cr, const PlotArea& a, const std::vector<Series>& series, LegendPos pos, double th) {
    std::vector<size_t> entries;
    for (size_t k = 0; k < series.size(); ++k)
        if (!series[k].label.empty()) entries.push_back(k);
    if (pos == LegendPos::none || entries.empty()) return;
    set_font(cr, kTickPt);
    double lw = 0;
    for (size_t k : entries) lw = std::max(lw, text_width(cr, series[k].label));
    const double row = th + 4, bw = 8 + 26 + 6 + lw + 8, bh = 6 + row * entries.size() + 2;
    const bool rgt = pos == LegendPos::upper_right || pos == LegendPos::lower_right;
    const bool up  = pos == LegendPos::upper_right || pos == LegendPos::upper_left;
    const double bx = rgt ? a.px1 - 8 - bw : a.px0 + 8, by = up ? a.py0 + 8 : a.py1 - 8 - bh;
    cairo_rectangle(cr, bx, by, bw, bh);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    for (size_t e = 0; e < entries.size(); ++e) {
        const Series& s = series[entries[e]];
        const double cy = by + 6 + row * e + row / 2 - 2;
        set_color(cr, s.color ? *s.color : series_color(int(entries[e])));
        if (s.line) {
            const double dash[] = {6, 4};
            cairo_set_dash(cr, dash, s.dashed ? 2 : 0, 0);
            cairo_set_line_width(cr, s.line_width);
            cairo_move_to(cr, bx + 8, cy);
            cairo_line_to(cr, bx + 34, cy);
            cairo_stroke(cr);
            cairo_set_dash(cr, nullptr, 0, 0);
        }
        cairo_set_line_width(cr, 1.5);
        draw_marker(cr, s.marker, bx + 21, cy, s.marker_size);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        draw_text(cr, s.label, bx + 40, cy, 0, 0.5);
    }
}

}  // namespace

void LinePlot::save(const std::string& path) const {
    // Data ranges over finite points.
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (const auto& s : series_)
        for (size_t i = 0; i < s.x.size(); ++i)
            if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
                xlo = std::min(xlo, s.x[i]);
                xhi = std::max(xhi, s.x[i]);
                ylo = std::min(ylo, s.y[i]);
                yhi = std::max(yhi, s.y[i]);
            }
    // Plain variables, not structured bindings: clang 14 cannot capture those in the lambdas below.
    const auto xr = x_range ? *x_range : padded_range(xlo, xhi);
    const auto yr = y_range ? *y_range : padded_range(ylo, yhi);
    const double x0 = xr.first, x1 = xr.second, y0 = yr.first, y1 = yr.second;
    QKV_CHECK(x0 < x1 && y0 < y1 && std::isfinite(x0) && std::isfinite(x1) && std::isfinite(y0) &&
                  std::isfinite(y1),
              "LinePlot::save: '", path, "': empty or non-finite axis range");
    const auto xt = nice_ticks(x0, x1, std::max(3, width / 110));
    const auto yt = nice_ticks(y0, y1, std::max(3, height / 70));

    render_to_file(path, width, height, [&](cairo_t* cr) {
        set_font(cr, kTickPt);
        const double th = font_height(cr);
        double ytw = 0;
        for (double v : yt) ytw = std::max(ytw, text_width(cr, tick_label(v, tick_step(yt))));
        const double left   = 10 + (ylabel.empty() ? 0 : 22) + ytw + 8;
        const double top    = title.empty() ? 14 : 38;
        const double bottom = 8 + th + 8 + (xlabel.empty() ? 0 : 22);
        const double right  = 22;
        const PlotArea a{left, width - right, top, height - bottom, x0, x1, y0, y1};
        QKV_CHECK(a.px1 - a.px0 > 40 && a.py1 - a.py0 > 40, "LinePlot::save: '", path, "': canvas ",
                  width, "x", height, " is too small for the labels");
        draw_grid_and_ticks(cr, a, xt, yt, grid);
        draw_series(cr, a, series_);
        // Frame.
        cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
        cairo_set_line_width(cr, 1);
        cairo_rectangle(cr, std::round(a.px0) + 0.5, std::round(a.py0) + 0.5, std::round(a.px1 - a.px0),
                        std::round(a.py1 - a.py0));
        cairo_stroke(cr);
        // Title and axis labels.
        if (!title.empty()) {
            set_font(cr, kTitlePt, true);
            draw_text(cr, title, (a.px0 + a.px1) / 2, 10, 0.5, 0);
        }
        set_font(cr, kLabelPt);
        if (!xlabel.empty()) draw_text(cr, xlabel, (a.px0 + a.px1) / 2, height - 6, 0.5, 1);
        if (!ylabel.empty()) draw_text(cr, ylabel, 8, (a.py0 + a.py1) / 2, 0.5, 0, -M_PI / 2);
        draw_legend(cr, a, series_, legend, th);
    }, "LinePlot::save");
}

// ---- HeatmapGrid --------------------------------------------------------------------------------

HeatmapGrid::HeatmapGrid(int64_t grid_rows, int64_t grid_cols)
    : grid_rows_(grid_rows), grid_cols_(grid_cols) {
    QKV_CHECK(grid_rows >= 1 && grid_cols >= 1 && grid_rows * grid_cols <= 4096,
              "HeatmapGrid: grid ", grid_rows, "x", grid_cols, " must have 1..4096 panels");
    panels_.resize(size_t(grid_rows * grid_cols));
}

HeatmapGrid& HeatmapGrid::set(int64_t r, int64_t c, HeatmapPanel p) {
    QKV_CHECK(r >= 0 && r < grid_rows_ && c >= 0 && c < grid_cols_, "HeatmapGrid::set: panel (",
              r, ", ", c, ") outside the ", grid_rows_, "x", grid_cols_, " grid");
    QKV_CHECK(p.rows >= 1 && p.cols >= 1 && int64_t(p.values.size()) == p.rows * p.cols,
              "HeatmapGrid::set: panel (", r, ", ", c, ") has ", p.values.size(),
              " values for a ", p.rows, "x", p.cols, " matrix");
    panels_[size_t(r * grid_cols_ + c)] = std::move(p);
    return *this;
}

Heatmap::Heatmap(std::vector<double> values, int64_t rows, int64_t cols) : HeatmapGrid(1, 1) {
    set(0, 0, {std::move(values), rows, cols, ""});
}

struct HeatmapGrid::Layout {
    int64_t max_rows = 0, max_cols = 0;
    double cell = 0, pw = 0, ph = 0;  // cell size, panel size (largest matrix)
    double left = 0, top = 0, hgap = 0, vgap = 0, panel_title_h = 0;
    double cbar_x = 0, width = 0, height = 0;
    double vmin = 0, vmax = 1;
    std::vector<double> cticks;
};

HeatmapGrid::Layout HeatmapGrid::layout() const {
    Layout L;
    bool any_title = false;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < panels_.size(); ++i) {
        QKV_CHECK(panels_[i].has_value(), "HeatmapGrid: panel (", int64_t(i) / grid_cols_, ", ",
                  int64_t(i) % grid_cols_, ") was never set");
        const auto& p = *panels_[i];
        L.max_rows = std::max(L.max_rows, p.rows);
        L.max_cols = std::max(L.max_cols, p.cols);
        any_title |= !p.title.empty();
        for (double v : p.values)
            if (std::isfinite(v)) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            }
    }
    QKV_CHECK(row_labels.empty() || int64_t(row_labels.size()) == L.max_rows, "HeatmapGrid: ",
              row_labels.size(), " row labels for ", L.max_rows, " rows");
    QKV_CHECK(col_labels.empty() || int64_t(col_labels.size()) == L.max_cols, "HeatmapGrid: ",
              col_labels.size(), " column labels for ", L.max_cols, " columns");
    L.vmin = vmin ? *vmin : (lo <= hi ? lo : 0.0);
    L.vmax = vmax ? *vmax : (lo <= hi ? hi : 1.0);
    if (!(L.vmax > L.vmin)) L.vmax = L.vmin + 1.0;
    L.cticks = nice_ticks(L.vmin, L.vmax, 5);

    const bool single  = grid_rows_ * grid_cols_ == 1;
    const double target = single ? 360 : 220;
    const bool labels  = !row_labels.empty() || !col_labels.empty();
    L.cell = cell_px > 0 ? cell_px
                         : std::clamp(std::floor(target / double(std::max(L.max_rows, L.max_cols))),
                                      labels ? 14.0 : 2.0, 48.0);
    L.pw = L.cell * double(L.max_cols);
    L.ph = L.cell * double(L.max_rows);

    // Text measurements on a scratch surface.
    cairo_surface_t* s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
    cairo_t* cr        = cairo_create(s);
    set_font(cr, kTickPt);
    const double th = font_height(cr);
    double rw = 0, cw = 0, cbw = 0;
    for (const auto& t : row_labels) rw = std::max(rw, text_width(cr, t));
    for (const auto& t : col_labels) cw = std::max(cw, text_width(cr, t));
    if (row_labels.empty()) rw = text_width(cr, std::to_string(L.max_rows - 1));
    if (col_labels.empty()) cw = th;  // horizontal index labels: one text line
    for (double v : L.cticks) cbw = std::max(cbw, text_width(cr, tick_label(v, tick_step(L.cticks))));
    set_font(cr, kTitlePt, true);
    const double title_w = title.empty() ? 0.0 : text_width(cr, title) + 20;
    cairo_destroy(cr);
    cairo_surface_destroy(s);

    L.panel_title_h = any_title ? th + 8 : 0;
    L.left  = 8 + (ylabel.empty() ? 0 : 22) + rw + 8;
    L.top   = (title.empty() ? 10 : 36) + L.panel_title_h;
    L.hgap  = 16;
    L.vgap  = 10 + L.panel_title_h;
    const double grid_w = double(grid_cols_) * L.pw + double(grid_cols_ - 1) * L.hgap;
    const double grid_h = double(grid_rows_) * L.ph + double(grid_rows_ - 1) * L.vgap;
    const double bottom = 6 + cw + 6 + (xlabel.empty() ? 0 : 22) + 6;
    L.cbar_x = L.left + grid_w + 18;
    const double right = colorbar ? 18 + 14 + 6 + cbw + 10 : 14;
    L.width  = std::max(L.left + grid_w + right, title_w);
    L.height = L.top + std::max(grid_h, colorbar ? 80.0 : 0.0) + bottom;
    return L;
}

std::pair<int, int> HeatmapGrid::canvas_size() const {
    const Layout L = layout();
    return {int(std::ceil(L.width)), int(std::ceil(L.height))};
}

void HeatmapGrid::save(const std::string& path) const {
    const Layout L = layout();
    const int W = int(std::ceil(L.width)), H = int(std::ceil(L.height));
    render_to_file(path, W, H, [&](cairo_t* cr) {
        set_font(cr, kTickPt);
        for (int64_t gr = 0; gr < grid_rows_; ++gr)
            for (int64_t gc = 0; gc < grid_cols_; ++gc) {
                const HeatmapPanel& p = *panels_[size_t(gr * grid_cols_ + gc)];
                const double ox = L.left + double(gc) * (L.pw + L.hgap);
                const double oy = L.top + double(gr) * (L.ph + L.vgap);
                // Cells (slightly overlapping to avoid hairline seams in PNG).
                for (int64_t i = 0; i < p.rows; ++i)
                    for (int64_t j = 0; j < p.cols; ++j) {
                        const double v = p.values[size_t(i * p.cols + j)];
                        if (std::isfinite(v))
                            set_color(cr, colormap(cmap, (v - L.vmin) / (L.vmax - L.vmin)));
                        else
                            cairo_set_source_rgb(cr, 0.8, 0.8, 0.8);
                        cairo_rectangle(cr, ox + double(j) * L.cell, oy + double(i) * L.cell,
                                        L.cell + 0.5, L.cell + 0.5);
                        cairo_fill(cr);
                    }
                const double pw = L.cell * double(p.cols), ph = L.cell * double(p.rows);
                cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
                cairo_set_line_width(cr, 1);
                cairo_rectangle(cr, ox, oy, pw, ph);
                cairo_stroke(cr);
                if (!p.title.empty()) {
                    set_font(cr, kTickPt + 1);
                    draw_text(cr, p.title, ox + pw / 2, oy - 5, 0.5, 1);
                    set_font(cr, kTickPt);
                }
                // Row ticks on the first column, column ticks on the last row (shared axes).
                if (gc == 0) {
                    const auto idx = index_ticks(p.rows, int(ph / 35));
                    for (int64_t i = 0; i < p.rows; ++i) {
                        std::string lab;
                        if (!row_labels.empty()) {
                            lab = row_labels[size_t(i)];
                        } else if (std::find(idx.begin(), idx.end(), i) != idx.end()) {
                            lab = std::to_string(i);
                        } else {
                            continue;
                        }
                        const double cy = oy + (double(i) + 0.5) * L.cell;
                        cairo_move_to(cr, ox - 4, cy);
                        cairo_line_to(cr, ox, cy);
                        cairo_stroke(cr);
                        draw_text(cr, lab, ox - 6, cy, 1, 0.5);
                    }
                }
                if (gr == grid_rows_ - 1) {
                    const auto idx = index_ticks(p.cols, int(pw / 35));
                    for (int64_t j = 0; j < p.cols; ++j) {
                        const double cx = ox + (double(j) + 0.5) * L.cell;
                        if (!col_labels.empty()) {
                            cairo_move_to(cr, cx, oy + ph);
                            cairo_line_to(cr, cx, oy + ph + 4);
                            cairo_stroke(cr);
                            draw_text(cr, col_labels[size_t(j)], cx, oy + ph + 6, 1, 0.5, -M_PI / 2);
                        } else if (std::find(idx.begin(), idx.end(), j) != idx.end()) {
                            cairo_move_to(cr, cx, oy + ph);
                            cairo_line_to(cr, cx, oy + ph + 4);
                            cairo_stroke(cr);
                            draw_text(cr, std::to_string(j), cx, oy + ph + 6, 0.5, 0);
                        }
                    }
                }
            }
        const double grid_w = double(grid_cols_) * L.pw + double(grid_cols_ - 1) * L.hgap;
        const double grid_h = double(grid_rows_) * L.ph + double(grid_rows_ - 1) * L.vgap;
        const double gy0 = L.top, gy1 = L.top + grid_h;
        if (!title.empty()) {
            set_font(cr, kTitlePt, true);
            draw_text(cr, title, L.left + grid_w / 2, 10, 0.5, 0);
        }
        set_font(cr, kLabelPt);
        if (!xlabel.empty()) draw_text(cr, xlabel, L.left + grid_w / 2, H - 6, 0.5, 1);
        if (!ylabel.empty()) draw_text(cr, ylabel, 8, (gy0 + gy1) / 2, 0.5, 0, -M_PI / 2);
        if (colorbar) {
            // Vertical bar spanning the panels (at least 80 px), vmax at the top.
            const double bh = std::max(80.0, gy1 - gy0), by0 = gy0, by1 = gy0 + bh, bx = L.cbar_x;
            cairo_pattern_t* g = cairo_pattern_create_linear(0, by1, 0, by0);
            for (int k = 0; k <= 32; ++k) {
                const Color c = colormap(cmap, k / 32.0);
                cairo_pattern_add_color_stop_rgb(g, k / 32.0, c.r, c.g, c.b);
            }
            cairo_rectangle(cr, bx, by0, 14, bh);
            cairo_set_source(cr, g);
            cairo_fill(cr);
            cairo_pattern_destroy(g);
            cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
            cairo_set_line_width(cr, 1);
            cairo_rectangle(cr, bx, by0, 14, bh);
            cairo_stroke(cr);
            set_font(cr, kTickPt);
            for (double v : L.cticks) {
                const double y = by1 - (v - L.vmin) / (L.vmax - L.vmin) * bh;
                cairo_move_to(cr, bx + 14, y);
                cairo_line_to(cr, bx + 18, y);
                cairo_stroke(cr);
                draw_text(cr, tick_label(v, tick_step(L.cticks)), bx + 20, y, 0, 0.5);
            }
        }
    }, "HeatmapGrid::save");
}

}  // namespace qkv::util
