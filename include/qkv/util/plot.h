#pragma once
// Small cairo plots for training curves and attention maps: LinePlot (loss curves, attention
// pooling), Heatmap (one attention matrix with token labels) and HeatmapGrid (D2L's
// show_heatmaps: layers × heads panels with one shared colour bar; d2l_spec.md §1.14).
// save(path) writes PNG or SVG by the file extension, atomically (util/atomic_file.h).
// Plain doubles, row-major; no Tensor.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qkv::util {

/// Largest canvas side save() draws, in px (each of width and height; the smallest is 16). A
/// 20000 × 20000 ARGB image is 1.6 GB in memory, and cairo refuses sides past 32767; a caller that
/// can size its plot beforehand (HeatmapGrid::canvas_size) checks against it before any work.
constexpr int kMaxCanvasPx = 20000;

struct Color {
    double r = 0, g = 0, b = 0, a = 1;  // each in [0, 1]
};

/// The i-th colour of matplotlib's "tab10" cycle (i wraps).
Color series_color(int i);

enum class Marker { none, circle, square, triangle, cross };

/// One curve. Non-finite points are skipped and break the line.
struct Series {
    std::string label;  // legend entry; empty: not in the legend
    std::vector<double> x, y;  // same length
    std::optional<Color> color;  // default: series_color(index)
    bool line         = true;  // false: markers only (scatter)
    bool dashed       = false;
    Marker marker     = Marker::none;
    double line_width = 1.8;
    double marker_size = 3.5;  // radius in px
};

enum class LegendPos { upper_right, upper_left, lower_left, lower_right, none };

/// Line/scatter plot with nice ticks (1-2-2.5-5 × 10^k), title, axis labels and a legend.
class LinePlot {
public:
    int width = 640, height = 420;  // canvas, px
    std::string title, xlabel, ylabel;
    LegendPos legend = LegendPos::upper_right;
    std::optional<std::pair<double, double>> x_range, y_range;  // default: data range + 4 %
    bool grid = true;  // light grid lines at the ticks

    /// Adds a series; throws qkv::Error when x and y differ in length. Returns *this.
    LinePlot& add(Series s);
    const std::vector<Series>& series() const { return series_; }
    /// Writes PNG (".png") or SVG (".svg"); throws qkv::Error on another extension, a size outside
    /// [16, kMaxCanvasPx], or a cairo/IO failure (naming the path).
    void save(const std::string& path) const;

private:
    std::vector<Series> series_;
};

enum class ColorMap { reds, blues, greys, viridis };

/// Colour of t in [0, 1] (clamped) on a sequential map (ColorBrewer Reds/Blues/Greys, viridis).
Color colormap(ColorMap cmap, double t);

/// One matrix, rows × cols, row-major.
struct HeatmapPanel {
    std::vector<double> values;
    int64_t rows = 0, cols = 0;
    std::string title;
};

/// A grid of heatmaps sharing one colour scale and one colour bar (D2L show_heatmaps: xlabel on
/// the last row, ylabel on the first column, titles per panel, cmap Reds). Row/column tick labels
/// (e.g. tokens; columns are written vertically) apply to every panel and are drawn on the first
/// column / last row; without them, integer index ticks are drawn. Non-finite cells are grey.
class HeatmapGrid {
public:
    /// grid_rows × grid_cols panels, filled with set(); throws qkv::Error if either is < 1.
    HeatmapGrid(int64_t grid_rows, int64_t grid_cols);

    std::string title, xlabel, ylabel;
    std::vector<std::string> row_labels, col_labels;  // empty, or one per row/column
    ColorMap cmap = ColorMap::reds;
    std::optional<double> vmin, vmax;  // default: min/max over all finite values
    bool colorbar = true;
    int cell_px   = 0;  // cell size; 0: chosen so the largest panel is about 220 px (grid) or 360 px

    /// Sets panel (r, c); throws qkv::Error when out of range or values.size() != rows * cols.
    HeatmapGrid& set(int64_t r, int64_t c, HeatmapPanel panel);
    /// Canvas size in px that save() will produce.
    std::pair<int, int> canvas_size() const;
    /// As LinePlot::save. Throws qkv::Error when a panel is unset or label counts mismatch.
    void save(const std::string& path) const;

private:
    struct Layout;
    Layout layout() const;
    int64_t grid_rows_, grid_cols_;
    std::vector<std::optional<HeatmapPanel>> panels_;
};

/// A single heatmap: a 1 × 1 HeatmapGrid with the matrix given at construction.
class Heatmap : public HeatmapGrid {
public:
    /// values: (rows, cols) row-major; throws qkv::Error when the size does not match.
    Heatmap(std::vector<double> values, int64_t rows, int64_t cols);
};

/// Nice tick positions covering [lo, hi] with about `target` ticks (Heckbert 1990 style, steps
/// 1, 2, 2.5, 5 × 10^k), only those within [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

}  // namespace qkv::util
